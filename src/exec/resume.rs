//! Resume (SPEC §5.8): an exec on a run that already holds this plan's
//! dispatches continues it. The event log is the durable record of what
//! happened; team-state may lag it by a flush interval.

use super::settle::Outcome;
use crate::plan::{Job, Plan};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Nothing recorded yet: run the first attempt.
    Fresh,
    Completed {
        attempt: u64,
    },
    Failed {
        attempt: u64,
        reason: String,
    },
    /// The last attempt failed retryably; this attempt is next.
    Retry {
        attempt: u64,
    },
    /// Dispatched by an executor that died before settling it.
    Orphan {
        attempt: u64,
        session_id: Option<String>,
        /// The wrapper's pid as the dispatch event recorded it.
        pid: Option<u32>,
    },
}

/// Per flattened job index (stage order), what the records say.
pub fn job_states(
    rec: &super::record::Recorder,
    plan: &Plan,
    _root: &Path,
) -> HashMap<usize, JobState> {
    let events = crate::state::events::read_all(rec.events.path()).unwrap_or_default();
    let mut by_key: HashMap<&str, Vec<&Value>> = HashMap::new();
    for e in &events {
        if e.get("planDigest").and_then(Value::as_str) != Some(plan.digest.as_str()) {
            continue;
        }
        if let Some(k) = e.get("workerKey").and_then(Value::as_str) {
            by_key.entry(k).or_default().push(e);
        }
    }
    let mut out = HashMap::new();
    for (i, job) in plan.jobs().enumerate() {
        let Some(list) = by_key.get(job.key.as_str()) else {
            continue;
        };
        out.insert(i, state_of(list));
    }
    out
}

fn state_of(events: &[&Value]) -> JobState {
    let attempt_of = |e: &Value| e.get("attempt").and_then(Value::as_u64).unwrap_or(0);
    let Some(last) = events.iter().map(|e| attempt_of(e)).max() else {
        return JobState::Fresh;
    };
    let of_last: Vec<&&Value> = events.iter().filter(|e| attempt_of(e) == last).collect();
    let has = |t: &str| {
        of_last
            .iter()
            .any(|e| e.get("type").and_then(Value::as_str) == Some(t))
    };
    if has("worker-result-collected") {
        return JobState::Completed { attempt: last };
    }
    if has("worker-retry-scheduled") {
        return JobState::Retry { attempt: last + 1 };
    }
    if has("worker-failed") {
        let reason = of_last
            .iter()
            .rev()
            .find_map(|e| e.get("reason").and_then(Value::as_str))
            .unwrap_or("failed")
            .to_string();
        return JobState::Failed {
            attempt: last,
            reason,
        };
    }
    let session_id = of_last
        .iter()
        .find_map(|e| e.get("sessionId").and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let pid = of_last
        .iter()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("worker-dispatched"))
        .find_map(|e| e.get("pid").and_then(Value::as_u64))
        .and_then(|p| u32::try_from(p).ok());
    JobState::Orphan {
        attempt: last,
        session_id,
        pid,
    }
}

/// Settle an orphaned attempt from its status sidecar: wait for a wrapper
/// that is still alive, then take the exit code it recorded.
pub fn adopt(
    job: &Job,
    root: &Path,
    interrupt: &Arc<AtomicBool>,
    dispatched_pid: Option<u32>,
) -> Outcome {
    let status_path = crate::compile::paths::abs_of(root, &job.status_path());
    loop {
        let doc = super::read_status(&status_path);
        let state = doc
            .as_ref()
            .and_then(|d| d.get("state"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if state == "exited" {
            let code = doc
                .as_ref()
                .and_then(|d| d.get("exitCode"))
                .and_then(Value::as_i64)
                .unwrap_or(1);
            return Outcome::exited(code as i32);
        }
        // A short job's wrapper writes its sidecar only at its first
        // heartbeat or its exit; until then the dispatch event's pid says
        // who to wait for.
        let pid = doc
            .as_ref()
            .and_then(|d| d.get("wrapperPid").or_else(|| d.get("pid")))
            .and_then(Value::as_u64)
            .and_then(|p| u32::try_from(p).ok())
            .or(dispatched_pid);
        match pid {
            Some(pid) if crate::process::pid_alive(pid) => {
                if interrupt.load(Ordering::Relaxed) {
                    return Outcome::cut("interrupted");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            _ => {
                return Outcome::cut(
                    "the worker ended without recording an exit code (its executor died before settling it)",
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_from_events() {
        let d = json!({"type": "worker-dispatched", "attempt": 1, "sessionId": "s1", "pid": 42});
        let c = json!({"type": "worker-result-collected", "attempt": 1});
        let f = json!({"type": "worker-failed", "attempt": 1, "reason": "boom"});
        let r = json!({"type": "worker-retry-scheduled", "attempt": 1});
        assert_eq!(state_of(&[&d, &c]), JobState::Completed { attempt: 1 });
        assert_eq!(
            state_of(&[&d, &f]),
            JobState::Failed {
                attempt: 1,
                reason: "boom".into()
            }
        );
        assert_eq!(state_of(&[&d, &f, &r]), JobState::Retry { attempt: 2 });
        assert_eq!(
            state_of(&[&d]),
            JobState::Orphan {
                attempt: 1,
                session_id: Some("s1".into()),
                pid: Some(42)
            }
        );
        let d2 = json!({"type": "worker-dispatched", "attempt": 2});
        assert_eq!(
            state_of(&[&d, &f, &r, &d2]),
            JobState::Orphan {
                attempt: 2,
                session_id: None,
                pid: None
            }
        );
    }
}
