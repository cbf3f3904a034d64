//! Attempt records: one row in team-state `attempts[]` per attempt of a job,
//! stamped when it starts and when it settles
//! (docs/exec.md#what-is-written-when).
//!
//! Settling is write-once. Recording the same outcome twice (a resumed
//! executor re-settling what a dead one already recorded) is harmless and
//! does nothing; recording a different outcome for a settled attempt is a
//! contradiction and is refused.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::team_state::{rows_mut, WorkerStatus, ATTEMPTS};
use super::StateError;

/// Status of an attempt that has started but not settled.
pub const STARTED: &str = "started";

/// Which attempt a record is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptId {
    /// "" for a job without an invocation: its record then has no
    /// `dispatchId` key (an empty one, as older records have, is the same).
    pub dispatch_id: String,
    /// The worker's state key.
    pub key: String,
    pub attempt: u32,
    /// The plan the attempt belongs to (`planDigest`), or "". A job without
    /// an invocation has no dispatch id, so without the plan two plans' first
    /// attempts of one worker would be the same record.
    pub plan: String,
}

impl AttemptId {
    pub fn new(dispatch_id: impl Into<String>, key: impl Into<String>, attempt: u32) -> Self {
        AttemptId {
            dispatch_id: dispatch_id.into(),
            key: key.into(),
            attempt,
            plan: String::new(),
        }
    }

    /// The same attempt, of the plan with this digest.
    pub fn in_plan(mut self, plan: impl Into<String>) -> Self {
        self.plan = plan.into();
        self
    }

    fn matches(&self, row: &Map<String, Value>) -> bool {
        row_dispatch_id(row) == Some(self.dispatch_id.as_str())
            && row.get("key").and_then(Value::as_str) == Some(self.key.as_str())
            && row.get("attempt").and_then(Value::as_u64) == Some(u64::from(self.attempt))
            && row.get("planDigest").and_then(Value::as_str).unwrap_or("") == self.plan
    }
}

/// How an attempt settled (docs/exec.md#settling-an-attempt): what settlement
/// decides and what the attempt record, the dispatch row and the worker's row
/// say. Only terminal statuses exist here; each is the worker status of the
/// same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttemptStatus {
    Completed,
    Timeout,
    Error,
}

impl AttemptStatus {
    pub fn as_str(self) -> &'static str {
        WorkerStatus::from(self).as_str()
    }
}

impl From<AttemptStatus> for WorkerStatus {
    fn from(status: AttemptStatus) -> Self {
        match status {
            AttemptStatus::Completed => WorkerStatus::Completed,
            AttemptStatus::Timeout => WorkerStatus::Timeout,
            AttemptStatus::Error => WorkerStatus::Error,
        }
    }
}

/// The result an attempt settled with; two outcomes are the same result when
/// all three fields are equal.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptOutcome {
    pub status: AttemptStatus,
    pub result_path: Option<String>,
    pub change_summary: Option<Value>,
}

impl AttemptOutcome {
    /// The outcome already written on a settled record, if it is settled.
    fn recorded(row: &Map<String, Value>) -> Option<RecordedOutcome<'_>> {
        row.get("finishedAt")?;
        Some(RecordedOutcome {
            status: row.get("status").and_then(Value::as_str).unwrap_or(""),
            result_path: row.get("resultPath").and_then(Value::as_str),
            change_summary: row.get("changeSummary").filter(|v| !v.is_null()),
        })
    }

    /// The change summary, a JSON `null` counting as none.
    fn summary(&self) -> Option<&Value> {
        self.change_summary.as_ref().filter(|v| !v.is_null())
    }

    fn describe(&self) -> String {
        RecordedOutcome::of(self).describe()
    }
}

/// Whether settling attempt `id` as `outcome` agrees with an earlier
/// settlement `previous`: `Ok(())` if it is the same result, the drift error
/// otherwise.
pub(crate) fn check_same_outcome(
    id: &AttemptId,
    previous: &AttemptOutcome,
    outcome: &AttemptOutcome,
) -> Result<(), StateError> {
    RecordedOutcome::of(previous).check(id, outcome)
}

struct RecordedOutcome<'a> {
    status: &'a str,
    result_path: Option<&'a str>,
    change_summary: Option<&'a Value>,
}

impl RecordedOutcome<'_> {
    fn of(outcome: &AttemptOutcome) -> RecordedOutcome<'_> {
        RecordedOutcome {
            status: outcome.status.as_str(),
            result_path: outcome.result_path.as_deref(),
            change_summary: outcome.summary(),
        }
    }

    fn same_as(&self, outcome: &AttemptOutcome) -> bool {
        self.status == outcome.status.as_str()
            && self.result_path == outcome.result_path.as_deref()
            && self.change_summary == outcome.summary()
    }

    /// `Ok(())` when `outcome` is this same result, else the drift error.
    fn check(&self, id: &AttemptId, outcome: &AttemptOutcome) -> Result<(), StateError> {
        if self.same_as(outcome) {
            return Ok(());
        }
        Err(StateError::AttemptDrift {
            dispatch_id: id.dispatch_id.clone(),
            key: id.key.clone(),
            attempt: id.attempt,
            recorded: self.describe(),
            attempted: outcome.describe(),
        })
    }

    fn describe(&self) -> String {
        describe(self.status, self.result_path, self.change_summary)
    }
}

fn describe(status: &str, result_path: Option<&str>, summary: Option<&Value>) -> String {
    let mut out = format!("`{status}`");
    if let Some(path) = result_path {
        out.push_str(&format!(" with result {path}"));
    }
    if summary.is_some() {
        out.push_str(" and a change summary");
    }
    out
}

/// A record's dispatch id: "" where it has none (absent, or empty as older
/// records wrote it); `None` where it is not a string.
pub(crate) fn row_dispatch_id(row: &Map<String, Value>) -> Option<&str> {
    match row.get("dispatchId") {
        None => Some(""),
        Some(v) => v.as_str(),
    }
}

/// A fresh record for an attempt that started at `started_at`.
fn new_record(id: &AttemptId, started_at: &str) -> Map<String, Value> {
    let Value::Object(mut row) = json!({
        "key": id.key,
        "attempt": id.attempt,
        "startedAt": started_at,
        "status": STARTED,
    }) else {
        unreachable!("json! object literal")
    };
    if !id.dispatch_id.is_empty() {
        row.insert("dispatchId".into(), json!(id.dispatch_id));
    }
    if !id.plan.is_empty() {
        row.insert("planDigest".into(), json!(id.plan));
    }
    row
}

/// Settle one record. `Ok(false)` when it was already settled the same way.
fn settle_record(
    row: &mut Map<String, Value>,
    id: &AttemptId,
    outcome: &AttemptOutcome,
    finished_at: &str,
) -> Result<bool, StateError> {
    if let Some(recorded) = AttemptOutcome::recorded(row) {
        return recorded.check(id, outcome).map(|()| false);
    }
    row.insert("finishedAt".into(), json!(finished_at));
    row.insert("status".into(), json!(outcome.status.as_str()));
    match &outcome.result_path {
        Some(path) => row.insert("resultPath".into(), json!(path)),
        None => row.remove("resultPath"),
    };
    match outcome.summary() {
        Some(summary) => row.insert("changeSummary".into(), summary.clone()),
        None => row.remove("changeSummary"),
    };
    Ok(true)
}

/// Pending writes to the attempt records of one attempt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptPatch {
    /// Create the record, stamped with this time, if it is missing.
    pub started_at: Option<String>,
    /// Settle it with this outcome at this time.
    pub finish: Option<(AttemptOutcome, String)>,
}

/// Apply attempt patches to `attempts[]`. Every patch is applied that can be;
/// the first drift found (a settled record asked to settle differently) is
/// returned after the rest were applied, the record keeping what it had.
pub fn apply_attempt_patches<'p>(
    doc: &mut Value,
    patches: impl IntoIterator<Item = (&'p AttemptId, &'p AttemptPatch)>,
) -> Result<(), StateError> {
    let rows = rows_mut(doc, ATTEMPTS);
    let mut slot: HashMap<AttemptId, usize> = HashMap::new();
    for (index, row) in rows.iter().enumerate() {
        if let Some(id) = row.as_object().and_then(id_of) {
            slot.entry(id).or_insert(index);
        }
    }
    let mut drift = None;
    for (id, patch) in patches {
        let index = match slot.get(id) {
            Some(&index) => index,
            None => {
                // A settlement without a recorded start (the start was lost,
                // or never flushed) still deserves a record.
                let Some(started_at) = patch
                    .started_at
                    .as_deref()
                    .or(patch.finish.as_ref().map(|(_, at)| at.as_str()))
                else {
                    continue;
                };
                slot.insert(id.clone(), rows.len());
                rows.push(Value::Object(new_record(id, started_at)));
                rows.len() - 1
            }
        };
        if let (Some((outcome, finished_at)), Value::Object(row)) =
            (&patch.finish, &mut rows[index])
        {
            if let Err(err) = settle_record(row, id, outcome, finished_at) {
                drift.get_or_insert(err);
            }
        }
    }
    drift.map_or(Ok(()), Err)
}

fn id_of(row: &Map<String, Value>) -> Option<AttemptId> {
    Some(AttemptId {
        dispatch_id: row_dispatch_id(row)?.to_string(),
        key: row.get("key")?.as_str()?.to_string(),
        attempt: u32::try_from(row.get("attempt")?.as_u64()?).ok()?,
        plan: row
            .get("planDigest")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    })
}

/// The record of attempt `id`.
pub fn find_attempt<'a>(doc: &'a Value, id: &AttemptId) -> Option<&'a Map<String, Value>> {
    super::team_state::rows(doc, ATTEMPTS)
        .iter()
        .filter_map(Value::as_object)
        .find(|row| id.matches(row))
}

/// Record that attempt `id` started at `started_at`. Returns whether a record
/// was created; an existing record (started or settled) is left as it is.
pub fn start_attempt(doc: &mut Value, id: &AttemptId, started_at: &str) -> bool {
    if find_attempt(doc, id).is_some() {
        return false;
    }
    rows_mut(doc, ATTEMPTS).push(Value::Object(new_record(id, started_at)));
    true
}

/// Settle attempt `id`. `Ok(false)` when it was already settled with the same
/// outcome; [`StateError::AttemptDrift`] when with a different one. An attempt
/// with no record gets one, started and finished at `finished_at`.
pub fn finish_attempt(
    doc: &mut Value,
    id: &AttemptId,
    outcome: &AttemptOutcome,
    finished_at: &str,
) -> Result<bool, StateError> {
    let rows = rows_mut(doc, ATTEMPTS);
    let existing = rows
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|row| id.matches(row));
    match existing {
        Some(row) => settle_record(row, id, outcome, finished_at),
        None => {
            let mut row = new_record(id, finished_at);
            settle_record(&mut row, id, outcome, finished_at)?;
            rows.push(Value::Object(row));
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::team_state::fresh_document;

    fn done(path: &str) -> AttemptOutcome {
        AttemptOutcome {
            status: AttemptStatus::Completed,
            result_path: Some(path.into()),
            change_summary: Some(json!({"mutationStatus": "ok"})),
        }
    }

    #[test]
    fn start_then_finish_fills_the_record() {
        let mut doc = fresh_document();
        let id = AttemptId::new("inv:attempt-1", "codex", 1);
        assert!(start_attempt(&mut doc, &id, "t0"));
        assert!(!start_attempt(&mut doc, &id, "t9"));
        assert_eq!(find_attempt(&doc, &id).unwrap()["status"], STARTED);

        assert!(finish_attempt(&mut doc, &id, &done("r.json"), "t1").unwrap());
        let row = find_attempt(&doc, &id).unwrap();
        assert_eq!(row["startedAt"], "t0");
        assert_eq!(row["finishedAt"], "t1");
        assert_eq!(row["status"], "completed");
        assert_eq!(row["resultPath"], "r.json");
        assert_eq!(row["changeSummary"]["mutationStatus"], "ok");
    }

    #[test]
    fn finishing_twice_same_is_noop_different_is_drift() {
        let mut doc = fresh_document();
        let id = AttemptId::new("inv:attempt-1", "codex", 1);
        start_attempt(&mut doc, &id, "t0");
        finish_attempt(&mut doc, &id, &done("r.json"), "t1").unwrap();
        assert!(!finish_attempt(&mut doc, &id, &done("r.json"), "t2").unwrap());
        assert_eq!(find_attempt(&doc, &id).unwrap()["finishedAt"], "t1");

        let other = AttemptOutcome {
            status: AttemptStatus::Error,
            ..done("r.json")
        };
        let err = finish_attempt(&mut doc, &id, &other, "t3").unwrap_err();
        assert!(matches!(err, StateError::AttemptDrift { attempt: 1, .. }));
        assert!(err.to_string().contains("inv:attempt-1"), "{err}");
        assert_eq!(find_attempt(&doc, &id).unwrap()["status"], "completed");

        let no_summary = AttemptOutcome {
            change_summary: None,
            ..done("r.json")
        };
        assert!(finish_attempt(&mut doc, &id, &no_summary, "t4").is_err());
    }

    #[test]
    fn a_null_change_summary_is_no_summary() {
        let mut doc = fresh_document();
        let id = AttemptId::new("n:attempt-1", "n", 1);
        let null = AttemptOutcome {
            change_summary: Some(Value::Null),
            ..done("r")
        };
        assert!(finish_attempt(&mut doc, &id, &null, "t").unwrap());
        assert!(!find_attempt(&doc, &id)
            .unwrap()
            .contains_key("changeSummary"));
        assert!(!finish_attempt(&mut doc, &id, &null, "t").unwrap());
        let none = AttemptOutcome {
            change_summary: None,
            ..done("r")
        };
        assert!(!finish_attempt(&mut doc, &id, &none, "t").unwrap());
    }

    #[test]
    fn finishing_an_unstarted_attempt_creates_it() {
        let mut doc = fresh_document();
        let id = AttemptId::new("", "gemini", 2);
        assert!(finish_attempt(&mut doc, &id, &done("x"), "t5").unwrap());
        let row = find_attempt(&doc, &id).unwrap();
        assert_eq!(row["startedAt"], "t5");
        assert_eq!(row["attempt"], 2);
        assert!(
            !row.contains_key("dispatchId"),
            "absent, not empty: {row:?}"
        );
    }

    #[test]
    fn a_record_without_a_dispatch_id_is_found_as_older_empty_ones_are() {
        let mut doc = fresh_document();
        let id = AttemptId::new("", "w", 1);
        assert!(start_attempt(&mut doc, &id, "t0"));
        assert!(!start_attempt(&mut doc, &id, "t1"));
        // An older okstra wrote `"dispatchId": ""`: the same attempt.
        let mut old = fresh_document();
        rows_mut(&mut old, ATTEMPTS).push(json!({"dispatchId": "", "key": "w", "attempt": 1, "startedAt": "t0", "status": STARTED}));
        assert!(!start_attempt(&mut old, &id, "t1"));
        assert!(finish_attempt(&mut old, &id, &done("r"), "t2").unwrap());
        apply_attempt_patches(
            &mut old,
            [(
                &id,
                &AttemptPatch {
                    started_at: Some("t3".into()),
                    finish: None,
                },
            )],
        )
        .unwrap();
        assert_eq!(super::super::team_state::rows(&old, ATTEMPTS).len(), 1);
        // A record with a dispatch id is another attempt.
        assert!(start_attempt(
            &mut doc,
            &AttemptId::new("inv:attempt-1", "w", 1),
            "t4"
        ));
    }

    #[test]
    fn patches_apply_what_they_can_and_report_drift() {
        let mut doc = fresh_document();
        let a = AttemptId::new("a:attempt-1", "a", 1);
        let b = AttemptId::new("b:attempt-1", "b", 1);
        start_attempt(&mut doc, &a, "t0");
        finish_attempt(&mut doc, &a, &done("a.json"), "t1").unwrap();

        let drift = AttemptPatch {
            started_at: None,
            finish: Some((done("elsewhere.json"), "t2".into())),
        };
        let fresh = AttemptPatch {
            started_at: Some("t3".into()),
            finish: Some((done("b.json"), "t4".into())),
        };
        let err = apply_attempt_patches(&mut doc, [(&a, &drift), (&b, &fresh)]).unwrap_err();
        assert!(matches!(err, StateError::AttemptDrift { .. }));
        assert_eq!(find_attempt(&doc, &a).unwrap()["resultPath"], "a.json");
        assert_eq!(find_attempt(&doc, &b).unwrap()["resultPath"], "b.json");
        assert_eq!(find_attempt(&doc, &b).unwrap()["startedAt"], "t3");
    }
}
