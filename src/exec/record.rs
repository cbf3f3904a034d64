//! What exec writes, and when (SPEC §5.6, §5.7). Events are appended as they
//! happen and are the durable record; team-state is the shared view, kept in
//! memory and written whole (under its lock, merged with other writers'
//! rows) at bounded intervals, at every stage end and on exit, so a run of
//! thousands of jobs does not rewrite an ever-larger document per event.

use crate::plan::{Job, Plan};
use crate::state::error_log::{self, ErrorRecord};
use crate::state::events::EventLog;
use crate::state::team_state::TeamStateStore;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub struct Recorder {
    pub store: TeamStateStore,
    pub events: EventLog,
    pub error_log: PathBuf,
    pub plan_digest: String,
    pub task_key: String,
    pub phase: String,
    pending_rows: Vec<Value>,
    pending_workers: BTreeMap<String, Map<String, Value>>,
    pending_attempts: Vec<Value>,
    last_flush: Instant,
    interval: Duration,
    /// Problems writing state, reported at the end (a dispatch never fails
    /// because bookkeeping did).
    pub problems: Vec<String>,
}

/// The key a dispatch row is found by: its dispatch id, or for jobs without
/// an invocation, the plan, worker and attempt it belongs to.
pub fn row_key(row: &Value) -> String {
    match row.get("dispatchId").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!(
            "{}#{}#{}",
            row.get("planDigest").and_then(Value::as_str).unwrap_or(""),
            row.get("workerKey").and_then(Value::as_str).unwrap_or(""),
            row.get("attempt").and_then(Value::as_u64).unwrap_or(0)
        ),
    }
}

impl Recorder {
    pub fn new(root: &Path, plan: &Plan) -> Self {
        let abs = |p: &str| crate::compile::paths::abs_of(root, p);
        Recorder {
            store: TeamStateStore::open(abs(&plan.run.team_state_path)),
            events: EventLog::new(abs(&plan.run.lead_events_path)),
            error_log: abs(&plan.run.error_log_path),
            plan_digest: plan.digest.clone(),
            task_key: plan.run.task_key.clone(),
            phase: plan.run.workflow_phase.clone(),
            pending_rows: Vec::new(),
            pending_workers: BTreeMap::new(),
            pending_attempts: Vec::new(),
            last_flush: Instant::now(),
            interval: Duration::from_millis(250),
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
            self.problems.push(format!("cannot append {kind} event: {e}"));
        }
    }

    pub fn dispatch_row(&mut self, row: Value) {
        self.pending_rows.push(row);
    }

    pub fn worker(&mut self, job: &Job, status: &str, reason: &str) {
        if job.role == "translator" && job.key == "translator" {
            // A translator has no workers[] row; its status lives on its
            // dispatch row.
            return;
        }
        let entry = self.pending_workers.entry(job.key.clone()).or_default();
        entry.insert("workerId".into(), json!(job.key));
        entry.insert("provider".into(), json!(job.provider));
        entry.insert("role".into(), json!(job.role));
        entry.insert("promptPath".into(), json!(job.prompt_path));
        entry.insert("resultPath".into(), json!(job.result_path));
        entry.insert("modelExecutionValue".into(), json!(job.model_execution_value));
        entry.insert("status".into(), json!(status));
        let now = crate::fsutil::utc_now();
        if status == "in-progress" {
            entry.insert("startedAt".into(), json!(now));
            entry.remove("endedAt");
            entry.remove("reason");
        } else {
            entry.insert("reason".into(), json!(reason));
            entry.insert("endedAt".into(), json!(now));
        }
    }

    pub fn attempt(&mut self, record: Value) {
        self.pending_attempts.push(record);
    }

    pub fn maybe_flush(&mut self) {
        if self.last_flush.elapsed() >= self.interval {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        self.last_flush = Instant::now();
        if self.pending_rows.is_empty() && self.pending_workers.is_empty() && self.pending_attempts.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.pending_rows);
        let workers = std::mem::take(&mut self.pending_workers);
        let attempts = std::mem::take(&mut self.pending_attempts);
        let mut drift = Vec::new();
        let result = self.store.mutate(|doc| {
            merge(doc, &rows, &workers, &attempts, &mut drift);
        });
        self.problems.extend(drift);
        if let Err(e) = result {
            self.problems.push(format!("cannot write team-state: {e}"));
            // Keep what was not written, so a later flush retries it.
            self.pending_rows = rows;
            self.pending_workers = workers;
            self.pending_attempts = attempts;
        }
    }

    /// Append a wrapper failure to the error log; never fails the dispatch.
    pub fn error_log(&mut self, job: &Job, attempt: u64, exit_code: i64, duration_ms: Option<i64>, message: &str, log: &Path) -> Value {
        let identity = job.identity.v2().map(|_| {
            let mut m = job.identity.wire_fields();
            m.insert("attempt".into(), json!(attempt));
            m
        });
        let record = ErrorRecord {
            task_key: self.task_key.clone(),
            phase: self.phase.clone(),
            agent: if job.key == crate::model::REPORT_WRITER {
                job.key.clone()
            } else {
                format!("{}-worker", job.key)
            },
            agent_role: if job.key == crate::model::REPORT_WRITER { "report-writer".into() } else { "worker".into() },
            model: job.model_execution_value.clone(),
            command: crate::render::shell_line(&job.command),
            exit_code,
            duration_ms,
            message: format!("attempt {attempt}: {message}"),
            stderr_excerpt: error_log::log_tail(log, 800),
            identity,
        };
        match error_log::append_error(&self.error_log, record.to_map()) {
            Ok(()) => json!({"ok": true, "path": self.error_log.display().to_string()}),
            Err(reason) => json!({"ok": false, "path": self.error_log.display().to_string(), "reason": reason}),
        }
    }
}

fn merge(
    doc: &mut Value,
    rows: &[Value],
    workers: &BTreeMap<String, Map<String, Value>>,
    attempts: &[Value],
    drift: &mut Vec<String>,
) {
    if !doc.is_object() {
        *doc = json!({});
    }
    let obj = doc.as_object_mut().expect("object");
    {
        let list = array(obj, "workerDispatches");
        let mut index: HashMap<String, usize> = list.iter().enumerate().map(|(i, r)| (row_key(r), i)).collect();
        for row in rows {
            let key = row_key(row);
            match index.get(&key) {
                Some(&i) => list[i] = row.clone(),
                None => {
                    index.insert(key, list.len());
                    list.push(row.clone());
                }
            }
        }
    }
    {
        let list = array(obj, "workers");
        let mut index: HashMap<String, usize> = list
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.get("workerId").and_then(Value::as_str).map(|k| (k.to_string(), i)))
            .collect();
        for (key, fields) in workers {
            let i = match index.get(key) {
                Some(&i) => i,
                None => {
                    list.push(json!({"workerId": key, "status": "not-run"}));
                    index.insert(key.clone(), list.len() - 1);
                    list.len() - 1
                }
            };
            if let Some(row) = list[i].as_object_mut() {
                if fields.get("status").and_then(Value::as_str) == Some("in-progress") {
                    row.remove("endedAt");
                    row.remove("reason");
                }
                for (k, v) in fields {
                    row.insert(k.clone(), v.clone());
                }
            }
        }
    }
    {
        let list = array(obj, "attempts");
        let mut index: HashMap<String, usize> = list.iter().enumerate().map(|(i, r)| (row_key(r), i)).collect();
        for rec in attempts {
            let key = row_key(rec);
            match index.get(&key) {
                Some(&i) => {
                    let existing = &list[i];
                    let finished = existing.get("finishedAt").is_some_and(|v| !v.is_null());
                    if finished && rec.get("finishedAt").is_some_and(|v| !v.is_null()) {
                        let same = ["status", "resultPath", "changeSummary"].iter().all(|k| existing.get(*k) == rec.get(*k));
                        if !same {
                            drift.push(format!("attempt {key} was already finished with a different result; kept the first"));
                        }
                        continue;
                    }
                    list[i] = rec.clone();
                }
                None => {
                    index.insert(key, list.len());
                    list.push(rec.clone());
                }
            }
        }
    }
}

fn array<'a>(obj: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    if !obj.get(key).is_some_and(Value::is_array) {
        obj.insert(key.into(), json!([]));
    }
    obj.get_mut(key).and_then(Value::as_array_mut).expect("array")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_replace_by_key_and_keep_other_writers() {
        let mut doc = json!({"workerDispatches": [{"dispatchId": "other:attempt-1", "status": "running"}], "custom": 1});
        let rows = vec![
            json!({"dispatchId": "a:attempt-1", "status": "running"}),
            json!({"planDigest": "p", "workerKey": "w", "attempt": 1, "status": "running"}),
        ];
        let mut drift = Vec::new();
        merge(&mut doc, &rows, &BTreeMap::new(), &[], &mut drift);
        let rows2 = vec![
            json!({"dispatchId": "a:attempt-1", "status": "completed"}),
            json!({"planDigest": "p", "workerKey": "w", "attempt": 1, "status": "error"}),
        ];
        merge(&mut doc, &rows2, &BTreeMap::new(), &[], &mut drift);
        let list = doc["workerDispatches"].as_array().unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[1]["status"], "completed");
        assert_eq!(list[2]["status"], "error");
        assert_eq!(doc["custom"], 1);
    }

    #[test]
    fn finishing_an_attempt_twice_differently_is_drift() {
        let mut doc = json!({});
        let a = json!({"dispatchId": "a:attempt-1", "finishedAt": "t", "status": "completed", "resultPath": "r"});
        let mut drift = Vec::new();
        merge(&mut doc, &[], &BTreeMap::new(), &[a.clone()], &mut drift);
        merge(&mut doc, &[], &BTreeMap::new(), &[a.clone()], &mut drift);
        assert!(drift.is_empty());
        let mut b = a.clone();
        b["status"] = json!("error");
        merge(&mut doc, &[], &BTreeMap::new(), &[b], &mut drift);
        assert_eq!(drift.len(), 1);
        assert_eq!(doc["attempts"][0]["status"], "completed");
    }
}
