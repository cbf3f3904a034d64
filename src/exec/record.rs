//! What exec writes, and when (SPEC §5.6, §5.7). Events are appended as they
//! happen and are the durable record a resumed exec reads; team-state is the
//! shared view, kept in a `Ledger` and written whole (under its lock, merged
//! with other writers' rows) at bounded intervals, after every settle round,
//! at every stage end and on exit — so a run of thousands of jobs never
//! rewrites an ever-larger document per event.

use crate::plan::{Job, Plan};
use crate::state::attempts::{AttemptId, AttemptOutcome, AttemptStatus};
use crate::state::error_log::{self, ErrorRecord};
use crate::state::events::EventLog;
use crate::state::team_state::{TeamStateStore, WorkerStatus};
use crate::state::Ledger;
use crate::vocab::Role;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Recorder {
    pub ledger: Ledger,
    pub events: EventLog,
    pub error_log: PathBuf,
    pub plan_digest: String,
    pub task_key: String,
    pub phase: String,
    /// Problems writing state, reported at the end: a dispatch never fails
    /// because bookkeeping did.
    pub problems: Vec<String>,
}

impl Recorder {
    pub fn new(root: &Path, plan: &Plan) -> Self {
        let abs = |p: &str| crate::compile::paths::abs_of(root, p);
        Recorder {
            ledger: Ledger::new(
                TeamStateStore::open(abs(&plan.run.team_state_path)),
                Duration::from_millis(250),
            ),
            events: EventLog::new(abs(&plan.run.lead_events_path)),
            error_log: abs(&plan.run.error_log_path),
            plan_digest: plan.digest.clone(),
            task_key: plan.run.task_key.clone(),
            phase: plan.run.workflow_phase.clone(),
            problems: Vec::new(),
        }
    }

    /// Identity and bookkeeping fields every event and row of a job carries.
    pub fn identity(&self, job: &Job, attempt: u64) -> Map<String, Value> {
        let mut m = job.identity.wire_fields();
        m.insert("attempt".into(), json!(attempt));
        if let Some(id) = job.dispatch_id_for(attempt) {
            m.insert("dispatchId".into(), json!(id));
        }
        m.insert("workerKey".into(), json!(job.key));
        m.insert("planDigest".into(), json!(self.plan_digest));
        m
    }

    pub fn event(&mut self, kind: &str, job: &Job, attempt: u64, facts: Map<String, Value>) {
        let mut fields = self.identity(job, attempt);
        fields.insert("maxAttempts".into(), json!(crate::plan::MAX_ATTEMPTS));
        fields.insert("dispatchMode".into(), json!(job.backend));
        fields.extend(facts);
        if let Err(e) = self.events.append(kind, fields) {
            self.problems
                .push(format!("cannot append a {kind} event: {e}"));
        }
    }

    pub fn dispatch_row(&mut self, row: Value) {
        self.ledger.upsert_dispatch(row);
    }

    /// A translator has no workers[] row; its status lives on its dispatch row.
    fn has_worker_row(job: &Job) -> bool {
        use crate::compile::translator::TRANSLATOR;
        !(job.role == Role::Translator && job.key == TRANSLATOR)
    }

    pub fn worker(&mut self, job: &Job, status: WorkerStatus, reason: &str) {
        if !Self::has_worker_row(job) {
            return;
        }
        let fields = json!({
            "provider": job.provider, "role": job.role, "promptPath": job.prompt_path,
            "resultPath": job.result_path, "modelExecutionValue": job.model_execution_value,
        });
        let fields = fields.as_object().cloned().unwrap_or_default();
        self.ledger.ensure_worker(&job.key, &fields);
        self.ledger.patch_worker(&job.key, status, reason, &fields);
    }

    fn attempt_id(&self, job: &Job, attempt: u64) -> AttemptId {
        AttemptId::new(
            job.dispatch_id_for(attempt).unwrap_or_default(),
            job.key.clone(),
            attempt as u32,
        )
        .in_plan(self.plan_digest.clone())
    }

    pub fn start_attempt(&mut self, job: &Job, attempt: u64) {
        self.ledger.start_attempt(&self.attempt_id(job, attempt));
    }

    pub fn finish_attempt(
        &mut self,
        job: &Job,
        attempt: u64,
        status: AttemptStatus,
        result_path: Option<String>,
        change_summary: Option<Value>,
    ) {
        let outcome = AttemptOutcome {
            status,
            result_path,
            change_summary,
        };
        if let Err(e) = self
            .ledger
            .finish_attempt(&self.attempt_id(job, attempt), outcome)
        {
            self.problems.push(e.to_string());
        }
    }

    pub fn maybe_flush(&mut self) {
        if let Err(e) = self.ledger.maybe_flush() {
            self.problems.push(format!("team-state: {e}"));
        }
    }

    pub fn flush(&mut self) {
        if let Err(e) = self.ledger.flush() {
            self.problems.push(format!("team-state: {e}"));
        }
    }

    /// Flush what is pending (and at least once per run).
    pub fn flush_if_dirty(&mut self) {
        if let Err(e) = self.ledger.flush_if_dirty() {
            self.problems.push(format!("team-state: {e}"));
        }
    }

    /// Append a wrapper failure to the error log; never fails the dispatch.
    pub fn error_log(
        &mut self,
        job: &Job,
        attempt: u64,
        exit_code: i64,
        duration_ms: Option<i64>,
        message: &str,
        log: &Path,
    ) -> Value {
        let identity = job.identity.v2().map(|_| {
            let mut m = job.identity.wire_fields();
            m.insert("attempt".into(), json!(attempt));
            m
        });
        let record = ErrorRecord {
            task_key: self.task_key.clone(),
            phase: self.phase.clone(),
            agent: error_log::agent_name(&job.key),
            agent_role: if job.key == crate::model::REPORT_WRITER {
                "report-writer".into()
            } else {
                "worker".into()
            },
            model: job.model_execution_value.clone(),
            command: crate::render::shell_line(&job.command),
            exit_code,
            duration_ms,
            message: format!("attempt {attempt}: {message}"),
            stderr_excerpt: error_log::log_tail(log, error_log::STDERR_TAIL_BYTES),
            identity,
        };
        match error_log::append_error(&self.error_log, record.to_map()) {
            Ok(()) => json!({"ok": true, "path": self.error_log.display().to_string()}),
            Err(reason) => {
                json!({"ok": false, "path": self.error_log.display().to_string(), "reason": reason})
            }
        }
    }
}
