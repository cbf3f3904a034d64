//! The plan document (docs/plan-format.md#the-plan-document): what
//! `okstra plan` writes and `okstra exec` runs. Field names are the wire names;
//! `formatVersion` is bumped whenever a field a reader must understand is
//! added.

use crate::canonical;
use crate::provider::Provider;
use crate::vocab::{Audience, Backend, Confinement, DispatchKind, MutationAudit, Role};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// 2: the digest is over RFC 8785 (JCS) canonical JSON; format 1 sorted
/// keys by UTF-8 bytes and wrote numbers as serde_json does.
pub const FORMAT_VERSION: u64 = 2;
pub const MAX_ATTEMPTS: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plan {
    pub format_version: u64,
    pub okstra_version: String,
    pub created_at: String,
    pub project_root: String,
    pub run: RunInfo,
    pub inputs: Vec<InputRecord>,
    pub policy: RetryPolicy,
    pub stages: Vec<Stage>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunInfo {
    pub task_key: String,
    pub manifest_path: String,
    pub team_state_path: String,
    pub lead_events_path: String,
    pub error_log_path: String,
    /// The backend a job gets when it names none.
    pub terminal_backend: Backend,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workflow_phase: String,
    /// `spec` or `roster` (or `translator`): how the jobs were chosen.
    pub mode: String,
    /// The spec's `[budget]`: what the whole run may spend
    /// (docs/exec.md#budgets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::RunBudget>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputRecord {
    /// manifest, spec, prompt, metadata, reservation, team-state
    pub kind: String,
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    pub max_attempts: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Stage {
    pub name: String,
    pub jobs: Vec<Job>,
}

/// v1 or v2 execution identity, as resolved at plan time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "version", deny_unknown_fields)]
pub enum Identity {
    #[serde(rename = "1")]
    V1 {
        #[serde(rename = "workerId")]
        worker_id: String,
    },
    #[serde(rename = "2")]
    V2(V2Identity),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct V2Identity {
    pub participant_ref: String,
    pub role_execution_ref: String,
    pub execution_label: String,
    pub duty_id: String,
    pub invocation_ref: String,
    pub assignment_ref: String,
    pub attempt: u64,
}

impl Identity {
    /// The identity fields as they appear on events and dispatch rows: v1
    /// `workerId`, or the v2 refs with their version markers ([`Who`]).
    pub fn wire_fields(&self) -> serde_json::Map<String, Value> {
        match serde_json::to_value(Who::from(self)) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        }
    }

    /// A name for people: the execution label for v2, the worker id for v1.
    pub fn label(&self) -> &str {
        match self {
            Identity::V1 { worker_id } => worker_id,
            Identity::V2(v) => &v.execution_label,
        }
    }

    pub fn v2(&self) -> Option<&V2Identity> {
        match self {
            Identity::V2(v) => Some(v),
            Identity::V1 { .. } => None,
        }
    }
}

/// The identity fields as events and dispatch rows carry them: v1
/// `workerId`, or the v2 refs with their version markers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Who {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_identity_version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participant_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_execution_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duty_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment_ref: Option<String>,
}

impl From<&Identity> for Who {
    /// The one place the identity's wire form is made.
    fn from(identity: &Identity) -> Who {
        match identity {
            Identity::V1 { worker_id } => Who {
                worker_id: Some(worker_id.clone()),
                ..Who::default()
            },
            Identity::V2(v) => Who {
                worker_id: None,
                schema_version: Some("2.0".into()),
                execution_identity_version: Some(2),
                participant_ref: Some(v.participant_ref.clone()),
                role_execution_ref: Some(v.role_execution_ref.clone()),
                execution_label: Some(v.execution_label.clone()),
                duty_id: Some(v.duty_id.clone()),
                invocation_ref: Some(v.invocation_ref.clone()),
                assignment_ref: Some(v.assignment_ref.clone()),
            },
        }
    }
}

/// The invocation fields carried over from a prompt's `.meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Invocation {
    pub invocation_id: String,
    pub audience: String,
    pub assignment_ref: String,
    pub digests: BTreeMap<String, String>,
    pub host_model_value: Option<String>,
}

/// A write policy (docs/audit.md#write-policies): glob allow-list over
/// project-relative paths (absolute for paths outside the project root), with
/// its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WritePolicy {
    /// The job's role as written (`Role::as_str`): the policy's label, and
    /// part of its digest.
    pub role: String,
    pub allow: Vec<String>,
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteEnforcement {
    pub mutation_audit: MutationAudit,
    /// Kernel confinement asked for (docs/confinement.md#kernel-confinement);
    /// what was applied is on each dispatch row. Absent means `none`: so a plan
    /// made before the key existed (whose wrapper argv carries no confinement)
    /// reads, and writes back, as what it runs.
    #[serde(default = "unconfined", skip_serializing_if = "is_unconfined")]
    pub confinement: Confinement,
}

fn unconfined() -> Confinement {
    Confinement::None
}

fn is_unconfined(c: &Confinement) -> bool {
    *c == Confinement::None
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Job {
    /// The worker's state key: v1 workerId, v2 last segment of assignmentRef.
    pub key: String,
    pub identity: Identity,
    pub provider: Provider,
    pub backend: Backend,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Audience>,
    pub dispatch_kind: DispatchKind,
    /// `dispatch_kind.round()`, written out for readers of the plan.
    pub round: u64,
    pub prompt_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_path: Option<String>,
    pub result_path: String,
    pub worker_result_path: String,
    pub completion_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_path: Option<String>,
    /// `worktree = "git"` (docs/worktrees.md): the job runs in its own git
    /// worktree (`worktree_path`), on its own branch, from a base commit
    /// fixed here; exec commits its result there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_worktree: Option<GitWorktree>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model_execution_value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<Invocation>,
    /// `<invocationId>:attempt-<n>` for the job's first attempt, where there
    /// is an invocation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_id: Option<String>,
    /// The wrapper argv exec runs (`okstra worker ...`), without a session id.
    pub command: Vec<String>,
    /// What the wrapper itself runs: the provider CLI's argv, or the given
    /// argv for `command` jobs. Shown for review.
    pub provider_command: Vec<String>,
    pub takes_session_id: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub idle_timeout_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// What one attempt may spend (docs/exec.md#budgets): the wrapper stops
    /// it past this and it settles `budget-exceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
    pub liveness_mode: String,
    pub write_policy: WritePolicy,
    pub write_enforcement: WriteEnforcement,
    /// What a confined worker may reach over the network
    /// (docs/confinement.md#network); absent on an unconfined job, and in a
    /// plan made before the key (whose wrapper argv leaves it open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// What a confined worker may read besides what okstra grants
    /// (docs/confinement.md#reads), as the spec wrote it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_paths: Vec<String>,
    /// The `pricing` of the job's model in the manifest's catalog, for the
    /// review (the wrapper prices each attempt from the catalog itself).
    /// Absent where the catalog prices nothing for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<crate::provider::Pricing>,
    /// How a `slurm` job is submitted; present exactly on `slurm` jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmOptions>,
}

/// A job's git worktree, as planned (docs/worktrees.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitWorktree {
    /// The full sha of the commit the worktree starts from, every attempt.
    pub base: String,
    /// What the base was taken from: `head`, `index`, or the commit-ish
    /// `worktreeBase` named.
    pub base_from: String,
    /// `okstra/<taskKey>/<state key>`, each part made a ref component.
    pub branch: String,
    /// Whether the worktree stays once its branch holds the commit
    /// (`worktreeKeep`, default true).
    pub keep: bool,
}

/// A job's `network` as the spec wrote it: a mode, or hosts allowed
/// besides the provider's (docs/confinement.md#network).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Network {
    Mode(crate::vocab::NetworkMode),
    Allow { allow: Vec<String> },
}

impl Network {
    pub fn mode(&self) -> crate::vocab::NetworkMode {
        match self {
            Network::Mode(m) => *m,
            Network::Allow { .. } => crate::vocab::NetworkMode::Provider,
        }
    }

    /// The hosts allowed besides the provider's.
    pub fn allow(&self) -> &[String] {
        match self {
            Network::Mode(_) => &[],
            Network::Allow { allow } => allow,
        }
    }
}

/// The `sbatch` options of a `slurm` job (docs/slurm.md#running-on-slurm), as
/// the spec gave them; what is absent is the cluster's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlurmOptions {
    /// `--partition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `--account`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `--time`, in Slurm's notation (`30`, `1:30:00`, `2-0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    /// `--cpus-per-task`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
    /// `--mem`, in Slurm's notation (`4G`, `500M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// More `sbatch` arguments, after okstra's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
}

/// The dispatch id of one attempt: the one place this shape is built.
pub fn dispatch_id(invocation_id: &str, attempt: u64) -> String {
    format!("{invocation_id}:attempt-{attempt}")
}

impl Job {
    /// A name for people: the execution label for v2, the worker id for v1.
    pub fn label(&self) -> &str {
        self.identity.label()
    }

    /// The attempt number the plan's first dispatch carries (v2 identity
    /// attempt, 1 for v1). Retries count up from here.
    pub fn first_attempt(&self) -> u64 {
        self.identity.v2().map(|v| v.attempt).unwrap_or(1)
    }

    pub fn dispatch_id_for(&self, attempt: u64) -> Option<String> {
        self.invocation
            .as_ref()
            .map(|inv| dispatch_id(&inv.invocation_id, attempt))
    }

    /// The argv exec starts for `attempt`: the plan's `command` with the
    /// per-attempt flags (`--attempt`, `--dispatch-id`, `--session-id`)
    /// before `--`. Its first word stays as planned (`okstra`): exec puts
    /// its own executable there. The one place this line is built, so the
    /// review shows what exec runs.
    pub fn worker_argv(&self, attempt: u64, session_id: Option<&str>) -> Vec<String> {
        let mut argv = self.command.clone();
        let split = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
        let mut extra = vec!["--attempt".to_string(), attempt.to_string()];
        if let Some(id) = self.dispatch_id_for(attempt) {
            extra.extend(["--dispatch-id".into(), id]);
        }
        if let Some(s) = session_id {
            extra.extend(["--session-id".into(), s.to_string()]);
        }
        argv.splice(split..split, extra);
        argv
    }

    pub fn log_path(&self) -> String {
        sidecar::beside(&self.prompt_path, sidecar::LOG)
    }

    pub fn status_path(&self) -> String {
        sidecar::beside(&self.prompt_path, sidecar::STATUS)
    }

    pub fn audit_sidecar_path(&self) -> String {
        sidecar::beside(&self.worker_result_path, sidecar::AUDIT)
    }

    pub fn error_sidecar_path(&self) -> String {
        sidecar::beside(&self.worker_result_path, sidecar::ERRORS)
    }
}

/// The files kept beside a job's prompt (`<prompt>.log`,
/// `<prompt>.status.json`) and worker result (`<workerResult>.audit.json`,
/// `<workerResult>.errors.json`). The wrapper, exec, settlement and the
/// write policy all name them through here, so they cannot disagree.
pub mod sidecar {
    use std::path::{Path, PathBuf};

    pub const LOG: &str = ".log";
    pub const STATUS: &str = ".status.json";
    pub const AUDIT: &str = ".audit.json";
    pub const ERRORS: &str = ".errors.json";

    pub fn beside(path: &str, suffix: &str) -> String {
        format!("{path}{suffix}")
    }

    pub fn beside_path(path: &Path, suffix: &str) -> PathBuf {
        let mut name = path.as_os_str().to_os_string();
        name.push(suffix);
        PathBuf::from(name)
    }
}

impl Plan {
    /// The digest over the canonical JSON of the plan without `digest`: the
    /// same value `digest_problem` recomputes from the document as read.
    /// Jobs are most of a plan, so their canonical texts are made in
    /// parallel (beside the rest of the document) and hashed in order where
    /// `stages` goes, never joined into one string.
    pub fn compute_digest(&self) -> String {
        use rayon::prelude::*;
        use sha2::{Digest, Sha256};
        // A string no plan holds: its JSON text marks where `stages` goes.
        const MARK: &str = "\u{0}okstra:stages\u{0}";
        let head = || {
            let head = Plan {
                format_version: self.format_version,
                okstra_version: self.okstra_version.clone(),
                created_at: self.created_at.clone(),
                project_root: self.project_root.clone(),
                run: self.run.clone(),
                inputs: self.inputs.clone(),
                policy: self.policy.clone(),
                stages: Vec::new(),
                digest: String::new(),
            };
            let mut head = serde_json::to_value(&head).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut head {
                m.remove("digest");
                m.insert("stages".into(), Value::from(MARK));
            }
            canonical::to_canonical_string(&head)
        };
        let jobs = || -> Vec<String> {
            self.jobs()
                .collect::<Vec<_>>()
                .par_iter()
                .map(|job| {
                    canonical::to_canonical_string(
                        &serde_json::to_value(job).unwrap_or(Value::Null),
                    )
                })
                .collect()
        };
        let (head, jobs) = rayon::join(head, jobs);
        let marker = canonical::to_canonical_string(&Value::from(MARK));
        let (before, after) = head.split_once(&marker).unwrap_or((&head, ""));
        let mut sha = Sha256::new();
        sha.update(before);
        sha.update("[");
        let mut jobs = jobs.iter();
        for (i, stage) in self.stages.iter().enumerate() {
            if i > 0 {
                sha.update(",");
            }
            // Keys in canonical order: "jobs" < "name".
            sha.update("{\"jobs\":[");
            for (k, job) in jobs.by_ref().take(stage.jobs.len()).enumerate() {
                if k > 0 {
                    sha.update(",");
                }
                sha.update(job);
            }
            sha.update("],\"name\":");
            sha.update(canonical::to_canonical_string(&Value::from(
                stage.name.as_str(),
            )));
            sha.update("}");
        }
        sha.update("]");
        sha.update(after);
        format!("sha256:{}", canonical::hex(&sha.finalize()))
    }

    /// The plan file's text: pretty JSON, keys in declaration order (the
    /// order a reviewer reads), and a final newline.
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    pub fn seal(&mut self) {
        self.digest = self.compute_digest();
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.stages.iter().flat_map(|s| s.jobs.iter())
    }
}

/// Why a plan document's recorded digest does not match its content, if it
/// does not. Computed over the document as read, so any edit is caught,
/// including one that adds a key okstra does not know. A plan holds only
/// integers canonical JSON keeps exact (±(2^53 − 1)): a larger one would be
/// rounded before hashing, so an edit could hide in the rounding; such a
/// plan is refused here whatever its digest.
pub fn digest_problem(doc: &Value) -> Option<String> {
    if let Some((at, n)) = canonical::first_inexact_integer(doc) {
        return Some(format!(
            "the plan holds {n} at `{at}`, an integer beyond {}, which canonical JSON (RFC 8785) cannot keep exact, so no digest vouches for it",
            canonical::MAX_EXACT_INTEGER
        ));
    }
    let recorded = doc.get("digest").and_then(Value::as_str).unwrap_or("");
    let actual = canonical::digest_without(doc, "digest");
    if recorded == actual {
        None
    } else if recorded.is_empty() {
        Some("the plan has no digest".into())
    } else {
        Some(format!("the plan records digest {recorded}, but its content digests to {actual}: it was edited after `okstra plan` wrote it"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spliced_digest_equals_the_document_digest() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "key": "w", "identity": {"version": "2", "participantRef": "p", "roleExecutionRef": "r",
            "executionLabel": "l", "dutyId": "d", "invocationRef": "i", "assignmentRef": "a/w", "attempt": 1},
            "provider": "command", "backend": "cli-wrapper", "role": "r", "dispatchKind": "initial", "round": 1,
            "promptPath": "p.md", "resultPath": "r.md", "workerResultPath": "r.md", "completionPaths": ["r.md"],
            "command": ["okstra", "worker"], "providerCommand": ["true"], "takesSessionId": false,
            "env": {"B": "2", "A": "1"}, "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
            "writePolicy": {"role": "r", "allow": ["r.md"], "digest": "sha256:x"},
            "writeEnforcement": {"mutationAudit": "batch"}
        }))
        .unwrap();
        let mut other = job.clone();
        other.key = "ü\"quoted".into();
        let mut plan = Plan {
            format_version: FORMAT_VERSION,
            okstra_version: "0".into(),
            created_at: "t".into(),
            project_root: "/r".into(),
            run: RunInfo {
                task_key: "k".into(),
                manifest_path: "m".into(),
                team_state_path: "t".into(),
                lead_events_path: "e".into(),
                error_log_path: "x".into(),
                terminal_backend: Backend::CliWrapper,
                workflow_phase: String::new(),
                mode: "spec".into(),
                budget: None,
            },
            inputs: vec![],
            policy: RetryPolicy { max_attempts: 2 },
            stages: vec![
                Stage {
                    name: "one".into(),
                    jobs: vec![job.clone(), other],
                },
                Stage {
                    name: "two \u{1}".into(),
                    jobs: vec![job],
                },
                Stage {
                    name: "empty".into(),
                    jobs: vec![],
                },
            ],
            digest: String::new(),
        };
        plan.seal();
        let doc = serde_json::to_value(&plan).unwrap();
        assert_eq!(digest_problem(&doc), None);
    }

    #[test]
    fn dispatch_id_shape() {
        assert_eq!(dispatch_id("inv-1", 2), "inv-1:attempt-2");
    }

    #[test]
    fn a_plan_holding_an_inexact_integer_has_a_digest_problem() {
        let doc =
            serde_json::json!({"formatVersion": FORMAT_VERSION, "round": 9007199254740992_u64});
        let mut sealed = doc.clone();
        sealed["digest"] = Value::from(canonical::digest(&doc));
        let problem = digest_problem(&sealed).expect("refused");
        assert!(
            problem.contains("9007199254740992 at `/round`"),
            "{problem}"
        );
        // Near miss: one less stays exact.
        let doc =
            serde_json::json!({"formatVersion": FORMAT_VERSION, "round": 9007199254740991_u64});
        let mut sealed = doc.clone();
        sealed["digest"] = Value::from(canonical::digest(&doc));
        assert_eq!(digest_problem(&sealed), None);
    }

    mod spliced {
        use super::super::*;
        use proptest::prelude::*;

        /// Text that stresses canonical JSON: controls, quotes, non-ASCII,
        /// and characters where UTF-8 and UTF-16 order part.
        fn text() -> impl Strategy<Value = String> {
            let ch = prop_oneof![
                Just('a'),
                Just('"'),
                Just('\\'),
                Just('\u{1}'),
                Just('\n'),
                Just('\u{e9}'),
                Just('\u{fb33}'),
                Just('\u{1f600}'),
                any::<char>(),
            ];
            prop::collection::vec(ch, 0..5).prop_map(|cs| cs.into_iter().collect())
        }

        fn job() -> impl Strategy<Value = Job> {
            (
                text(),
                prop::collection::btree_map(text(), text(), 0..4),
                0..=canonical::MAX_EXACT_INTEGER,
                prop::option::of(0..=canonical::MAX_EXACT_INTEGER),
                prop::collection::vec(text(), 0..3),
                any::<bool>(),
            )
                .prop_map(|(key, env, idle, timeout, argv, v1)| {
                    let mut job: Job = serde_json::from_value(serde_json::json!({
                        "key": "k", "identity": {"version": "1", "workerId": "w"},
                        "provider": "command", "backend": "cli-wrapper", "role": "r",
                        "dispatchKind": "initial", "round": 1, "promptPath": "p.md",
                        "resultPath": "r.md", "workerResultPath": "r.md",
                        "completionPaths": ["r.md"], "command": ["okstra", "worker"],
                        "providerCommand": ["true"], "takesSessionId": false,
                        "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
                        "writePolicy": {"role": "r", "allow": ["r.md"], "digest": "sha256:x"},
                        "writeEnforcement": {"mutationAudit": "batch"}
                    }))
                    .expect("a job");
                    if !v1 {
                        job.identity = Identity::V2(V2Identity {
                            participant_ref: key.clone(),
                            role_execution_ref: "re".into(),
                            execution_label: key.clone(),
                            duty_id: "d".into(),
                            invocation_ref: "i".into(),
                            assignment_ref: format!("initial/{key}"),
                            attempt: idle,
                        });
                    }
                    job.key = key;
                    job.env = env;
                    job.idle_timeout_seconds = idle;
                    job.timeout_seconds = timeout;
                    job.provider_command = argv;
                    job
                })
        }

        fn plan() -> impl Strategy<Value = Plan> {
            (
                prop::collection::vec((text(), prop::collection::vec(job(), 0..4)), 0..4),
                text(),
                prop::collection::vec((text(), text()), 0..3),
            )
                .prop_map(|(stages, root, inputs)| Plan {
                    format_version: FORMAT_VERSION,
                    okstra_version: "0".into(),
                    created_at: "t".into(),
                    project_root: root,
                    run: RunInfo {
                        task_key: "k".into(),
                        manifest_path: "m".into(),
                        team_state_path: "t".into(),
                        lead_events_path: "e".into(),
                        error_log_path: "x".into(),
                        terminal_backend: crate::vocab::Backend::CliWrapper,
                        workflow_phase: String::new(),
                        mode: "spec".into(),
                        budget: None,
                    },
                    inputs: inputs
                        .into_iter()
                        .map(|(kind, path)| InputRecord {
                            kind,
                            path,
                            sha256: "0".repeat(64),
                        })
                        .collect(),
                    policy: RetryPolicy { max_attempts: 2 },
                    stages: stages
                        .into_iter()
                        .map(|(name, jobs)| Stage { name, jobs })
                        .collect(),
                    digest: String::new(),
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// The parallel, spliced digest is the digest of the whole
            /// document, by this tree's writer and by an independent one.
            #[test]
            fn spliced_digest_is_the_whole_documents_digest(mut plan in plan()) {
                plan.seal();
                let doc = serde_json::to_value(&plan).unwrap();
                prop_assert_eq!(digest_problem(&doc), None);
                let mut bare = doc.clone();
                bare.as_object_mut().unwrap().remove("digest");
                let whole = serde_json_canonicalizer::to_vec(&bare).unwrap();
                prop_assert_eq!(
                    &plan.digest,
                    &format!("sha256:{}", canonical::sha256_hex(&whole))
                );
                prop_assert_eq!(&plan.digest, &canonical::digest(&bare));
            }
        }
    }
}
