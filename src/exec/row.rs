//! A `workerDispatches[]` row of team-state (docs/exec.md#what-is-written-when):
//! one type for the wire form exec writes, with keys as the original's
//! (`workerId`, `dispatchId`, ...). Rows are read back by the few keys each
//! reader needs (status, usage, the dispatch id), not as this type: a row
//! carries the metadata's digests under their own names, which no type can
//! tell apart from other keys another writer added.

use super::event::{Dispatched, Handle, Settled, Who};
use crate::plan::{Job, WriteEnforcement};
use crate::provider::{Provider, Usage};
use crate::state::attempts::AttemptStatus;
use crate::vocab::{Backend, DispatchKind, FailureKind, Role};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Where an attempt stands on its dispatch row: running until settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchStatus {
    Running,
    Completed,
    Timeout,
    Error,
}

impl DispatchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchStatus::Running => "running",
            // A settled dispatch says what its attempt settled as.
            DispatchStatus::Completed => AttemptStatus::Completed.as_str(),
            DispatchStatus::Timeout => AttemptStatus::Timeout.as_str(),
            DispatchStatus::Error => AttemptStatus::Error.as_str(),
        }
    }
}

impl From<AttemptStatus> for DispatchStatus {
    fn from(s: AttemptStatus) -> Self {
        match s {
            AttemptStatus::Completed => DispatchStatus::Completed,
            AttemptStatus::Timeout => DispatchStatus::Timeout,
            AttemptStatus::Error => DispatchStatus::Error,
        }
    }
}

/// One dispatch row: the job's identity and paths, the dispatch's facts,
/// and the settlement's once there is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatchRow {
    #[serde(flatten)]
    pub who: Who,
    pub attempt: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_id: Option<String>,
    pub worker_key: String,
    pub plan_digest: String,
    pub role: Role,
    pub kind: DispatchKind,
    pub round: u64,
    pub provider: Provider,
    pub backend: Backend,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded_from: Option<Backend>,
    pub liveness_mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub prompt_path: String,
    pub result_path: String,
    pub worker_result_path: String,
    pub completion_paths: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_path: Option<String>,
    /// The job's own branch, for a `worktree = "git"` job
    /// (docs/worktrees.md#running).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_branch: Option<String>,
    pub model_execution_value: String,
    pub write_policy_digest: String,
    pub write_enforcement: WriteEnforcement,
    /// The invocation's fields, for a job with invocation metadata.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<InvocationFields>,
    /// The wrapper's pid, or the Slurm job id.
    #[serde(flatten)]
    pub handle: Handle,
    pub started_at: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    pub status: DispatchStatus,
    pub reason: String,
    /// The settlement's facts, once settled.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
}

/// A job's invocation fields as its rows carry them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationFields {
    pub invocation_id: String,
    pub audience: String,
    pub assignment_ref: String,
    pub prompt_metadata_path: Option<String>,
    /// `catalogDigest`, `promptDigest`, ... each under its own key.
    #[serde(flatten)]
    pub digests: BTreeMap<String, String>,
    pub host_model_value: Option<String>,
}

/// What a settled attempt's row adds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ended {
    pub ended_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cli_session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confinement: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::vocab::NetworkMode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<crate::egress::Destination>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_state: Option<crate::provider::state::Report>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cli_argv: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resumable: bool,
    /// The commit the job's branch got from this attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_commit: Option<String>,
    /// Where what an attempt that did not complete left was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_kept_branch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_kept_commit: Option<String>,
}

impl DispatchRow {
    /// The row of `job`'s attempt `d`, settled as `settled` where it is.
    pub fn of(job: &Job, d: &Dispatched, settled: Option<&Settled>) -> DispatchRow {
        let invocation = job.invocation.as_ref().map(|inv| InvocationFields {
            invocation_id: inv.invocation_id.clone(),
            audience: inv.audience.clone(),
            assignment_ref: inv.assignment_ref.clone(),
            prompt_metadata_path: job.metadata_path.clone(),
            digests: inv.digests.clone(),
            host_model_value: inv.host_model_value.clone(),
        });
        let (status, reason) = match settled {
            None => (DispatchStatus::Running, String::new()),
            Some(s) => (s.status.into(), s.reason.clone()),
        };
        DispatchRow {
            who: d.head.who.clone(),
            attempt: d.head.attempt,
            dispatch_id: d.head.dispatch_id.clone(),
            worker_key: job.key.clone(),
            plan_digest: d.head.plan_digest.clone(),
            role: job.role.clone(),
            kind: job.dispatch_kind.clone(),
            round: job.round,
            provider: job.provider,
            backend: d.head.dispatch_mode,
            stage: d.head.stage.clone(),
            degraded_from: d.head.degraded_from,
            liveness_mode: job.liveness_mode.clone(),
            session_id: d.session_id.clone(),
            prompt_path: job.prompt_path.clone(),
            result_path: job.result_path.clone(),
            worker_result_path: job.worker_result_path.clone(),
            completion_paths: job.completion_paths.clone(),
            worktree_path: job.worktree_path.clone(),
            worktree_branch: job.git_worktree.as_ref().map(|g| g.branch.clone()),
            model_execution_value: job.model_execution_value.clone(),
            write_policy_digest: job.write_policy.digest.clone(),
            write_enforcement: job.write_enforcement.clone(),
            invocation,
            handle: d.handle,
            started_at: d.head.ts.clone(),
            argv: d.argv.clone(),
            status,
            reason,
            ended: settled.map(Ended::of),
        }
    }

    /// The row as team-state holds it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

impl Ended {
    fn of(s: &Settled) -> Ended {
        Ended {
            ended_at: s.head.ts.clone(),
            exit_code: s.exit_code,
            served_model: s.served_model.clone(),
            cli_session_id: s.cli_session_id.clone(),
            failure_kind: s.failure_kind.clone(),
            confinement: s.confinement.clone(),
            network: s.network,
            egress: s.egress.clone(),
            provider_state: s.provider_state.clone(),
            cli_argv: s.cli_argv.clone(),
            usage: s.usage.clone(),
            resumable: s.resumable,
            worktree_commit: s.worktree.as_ref().and_then(|w| w.commit.clone()),
            worktree_kept_branch: s.worktree.as_ref().and_then(|w| w.kept_branch.clone()),
            worktree_kept_commit: s.worktree.as_ref().and_then(|w| w.kept_commit.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::event::Head;

    /// The v2 implementer of tests/it/fixtures/plans/v2-pipeline.json.
    fn job() -> Job {
        let doc: Value = serde_json::from_str(include_str!(
            "../../tests/it/fixtures/plans/v2-pipeline.json"
        ))
        .unwrap();
        serde_json::from_value(doc["stages"][0]["jobs"][0].clone()).unwrap()
    }

    fn dispatched(job: &Job) -> Dispatched {
        Dispatched {
            head: Head {
                ts: "2026-01-01T00:00:00Z".into(),
                who: Who::from(&job.identity),
                attempt: 2,
                dispatch_id: job.dispatch_id_for(2),
                worker_key: job.key.clone(),
                plan_digest: "sha256:x".into(),
                max_attempts: 2,
                dispatch_mode: Backend::Pane,
                degraded_from: Some(Backend::Pane),
                stage: Some("s".into()),
            },
            handle: Handle::Slurm { slurm_job_id: 9 },
            pid_start: Some(3),
            session_id: Some("sess".into()),
            prompt_path: "p".into(),
            result_path: "r".into(),
            argv: vec!["a".into()],
            tmp_dir: None,
            completion_paths_before: vec![],
            worktree: None,
        }
    }

    /// The wire form, key by key, as the row was written before it had a
    /// type (and as team-state readers of the original expect it).
    #[test]
    fn a_settled_v2_row_has_every_key_of_the_wire_form() {
        let job = job();
        let d = dispatched(&job);
        let settled = Settled {
            head: Head {
                ts: "2026-01-02T00:00:00Z".into(),
                ..d.head.clone()
            },
            status: AttemptStatus::Timeout,
            reason: "why".into(),
            exit_code: Some(124),
            wrapper_exit_code: Some(1),
            missing_completion_paths: vec![],
            served_model: Some("m".into()),
            cli_session_id: Some("c".into()),
            failure_kind: Some(FailureKind::Timeout),
            cli_argv: vec!["x".into()],
            usage: Some(Usage::default()),
            confinement: Some("landlock-abi7".into()),
            network: Some(crate::vocab::NetworkMode::Provider),
            egress: vec![crate::egress::Destination {
                host: "api.example.com".into(),
                port: 443,
                allowed: true,
                connections: 2,
                bytes_out: 10,
                bytes_in: 20,
            }],
            provider_state: Some(crate::provider::state::Report {
                var: "CLAUDE_CONFIG_DIR".into(),
                writes: vec!["settings.json".into()],
                more_writes: 0,
                credentials: None,
            }),
            resumable: true,
            mutation_audit: None,
            error_log_append: None,
            worktree: None,
        };
        let expected: Value = serde_json::from_str(
            r#"{
  "argv": [
    "a"
  ],
  "assignmentDigest": "a",
  "assignmentRef": "initial/impl-1",
  "attempt": 2,
  "audience": "implementation-executor",
  "backend": "pane",
  "catalogDigest": "c",
  "cliArgv": [
    "x"
  ],
  "cliSessionId": "c",
  "completionPaths": [
    "results/impl.md"
  ],
  "confinement": "landlock-abi7",
  "degradedFrom": "pane",
  "dispatchId": "inv-impl:attempt-2",
  "dutyDigest": "d",
  "dutyId": "implementation-executor",
  "egress": [
    {
      "allowed": true,
      "bytesIn": 20,
      "bytesOut": 10,
      "connections": 2,
      "host": "api.example.com",
      "port": 443
    }
  ],
  "endedAt": "2026-01-02T00:00:00Z",
  "executionIdentityVersion": 2,
  "executionLabel": "impl-1",
  "exitCode": 124,
  "failureKind": "timeout",
  "hostModelValue": null,
  "instructionDigest": "i",
  "invocationId": "inv-impl",
  "invocationRef": "inv-impl",
  "kind": "initial",
  "livenessMode": "wrapper-status",
  "modelExecutionValue": "model-a",
  "network": "provider",
  "participantRef": "p-impl",
  "planDigest": "sha256:x",
  "promptDigest": "p",
  "promptMetadataPath": "prompts/impl.md.meta.json",
  "promptPath": "prompts/impl.md",
  "provider": "command",
  "providerState": {
    "var": "CLAUDE_CONFIG_DIR",
    "writes": [
      "settings.json"
    ]
  },
  "reason": "why",
  "resultPath": "results/impl.md",
  "resumable": true,
  "role": "implementer",
  "roleExecutionRef": "re-impl",
  "round": 1,
  "schemaVersion": "2.0",
  "servedModel": "m",
  "sessionId": "sess",
  "slurmJobId": 9,
  "stage": "s",
  "startedAt": "2026-01-01T00:00:00Z",
  "status": "timeout",
  "usage": {
    "inputTokens": 0,
    "outputTokens": 0,
    "tokensFrom": "cli-output",
    "totalTokens": 0
  },
  "workerKey": "impl-1",
  "workerResultPath": "results/impl.md",
  "writeEnforcement": {
    "mutationAudit": "batch"
  },
  "writePolicyDigest": "sha256:847c01c1cbb0b5b22e1f72709c7c2d72c007649712a60edfa92041e4bd17851d"
}"#,
        )
        .unwrap();
        assert_eq!(
            DispatchRow::of(&job, &d, Some(&settled)).to_value(),
            expected
        );
    }

    #[test]
    fn a_row_not_yet_settled_is_running_with_no_reason_and_no_end() {
        let job = job();
        let row = DispatchRow::of(&job, &dispatched(&job), None).to_value();
        assert_eq!(row["status"], "running");
        assert_eq!(row["reason"], "");
        for key in ["endedAt", "exitCode", "failureKind", "usage", "resumable"] {
            assert!(row.get(key).is_none(), "{key}: {row}");
        }
    }

    #[test]
    fn a_dispatch_status_is_written_as_its_name_says() {
        use DispatchStatus::*;
        for status in [Running, Completed, Timeout, Error] {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        for settled in [
            AttemptStatus::Completed,
            AttemptStatus::Timeout,
            AttemptStatus::Error,
        ] {
            assert_eq!(DispatchStatus::from(settled).as_str(), settled.as_str());
        }
    }
}
