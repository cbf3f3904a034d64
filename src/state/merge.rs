//! Merging a ledger's pending rows into team-state without holding the
//! document as one tree.
//!
//! Team-state of a run of 10,000 jobs is tens of megabytes; a
//! `serde_json::Value` of it is several times that. A flush only touches the
//! rows it has news for, so the file is read as text: each row of
//! `workers[]`, `workerDispatches[]` and `attempts[]` stays a slice of the
//! file unless a pending change names it, in which case that row alone is
//! parsed, changed by the same rules as ever ([`super::team_state`],
//! [`super::attempts`]) and written back. The result is streamed to the
//! writer: one key a line at the top, one row a line in each array.

use super::attempts::{apply_attempt_patches, AttemptId, AttemptPatch};
use super::team_state::{
    apply_worker_patches, dispatch_row_key, mark_pristine_not_run, upsert_dispatches, WorkerPatch,
    ATTEMPTS, WORKERS, WORKER_DISPATCHES,
};
use super::StateError;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Write};
use std::path::Path;

/// The changes of one flush.
pub struct Changes<'p> {
    pub workers: Vec<(&'p str, &'p WorkerPatch)>,
    pub pristine: &'p [(String, String)],
    pub dispatches: &'p [Value],
    pub attempts: Vec<(&'p AttemptId, &'p AttemptPatch)>,
}

/// The keys a row is recognised by, read without parsing the rest of it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RowKeys<'a> {
    #[serde(borrow, default)]
    worker_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    dispatch_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    plan_digest: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    worker_key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    key: Option<Cow<'a, str>>,
    #[serde(default)]
    attempt: Option<Value>,
}

impl RowKeys<'_> {
    fn of(row: &RawValue) -> RowKeys<'_> {
        serde_json::from_str(row.get()).unwrap_or_default()
    }

    fn attempt(&self) -> Option<u64> {
        self.attempt.as_ref().and_then(Value::as_u64)
    }

    /// The dispatch-row key of [`dispatch_row_key`], from the keys alone.
    fn dispatch_key(&self) -> Option<String> {
        if let Some(id) = self.dispatch_id.as_deref().filter(|s| !s.is_empty()) {
            return Some(id.to_string());
        }
        let plan = self.plan_digest.as_deref().filter(|s| !s.is_empty())?;
        Some(format!(
            "{plan}#{}#{}",
            self.worker_key.as_deref()?,
            self.attempt()?
        ))
    }

    fn attempt_id(&self) -> Option<AttemptId> {
        Some(AttemptId {
            // Absent for a job without an invocation (see `AttemptId`).
            dispatch_id: self.dispatch_id.as_deref().unwrap_or("").to_string(),
            key: self.key.as_deref()?.to_string(),
            attempt: u32::try_from(self.attempt()?).ok()?,
            plan: self.plan_digest.as_deref().unwrap_or("").to_string(),
        })
    }
}

/// Team-state with the changes merged in, ready to be written.
pub struct Merged<'a> {
    top: BTreeMap<Cow<'a, str>, &'a RawValue>,
    keys: Vec<String>,
    workers: Vec<Row<'a>>,
    dispatches: Vec<Row<'a>>,
    attempts: Vec<Row<'a>>,
    /// The attempt drift of [`apply_attempt_patches`], if any: everything
    /// else is written all the same.
    pub drift: Result<(), StateError>,
}

/// Merge `changes` into the team-state text `old` (empty or blank: a fresh
/// document). Nothing is written: a document that is not team-state is an
/// error before anything is.
pub fn merge<'a>(
    path: &Path,
    old: &'a [u8],
    empty: &'a RawValue,
    changes: &Changes,
) -> Result<Merged<'a>, StateError> {
    let not_json = |source| StateError::Parse {
        path: path.to_path_buf(),
        source,
    };
    let blank = old.iter().all(u8::is_ascii_whitespace);
    let mut top: BTreeMap<Cow<str>, &RawValue> = if blank {
        BTreeMap::new()
    } else {
        serde_json::from_slice(old).map_err(not_json)?
    };
    for key in [
        WORKERS,
        WORKER_DISPATCHES,
        super::team_state::AGENT_DISPATCHES,
        super::team_state::AGENT_RESULT_LINKS,
    ] {
        top.entry(Cow::Borrowed(key)).or_insert(empty);
    }
    let rows_of = |key: &str| -> Result<Vec<&RawValue>, StateError> {
        match top.get(key) {
            None => Ok(Vec::new()),
            Some(raw) => serde_json::from_str(raw.get()).map_err(|_| StateError::NotAnArray {
                path: path.to_path_buf(),
                key: key.to_string(),
            }),
        }
    };
    // Check every well-known list before writing anything.
    for key in super::team_state::ARRAY_KEYS {
        rows_of(key)?;
    }

    let workers = rows_of(WORKERS)?;
    let worker_keys: HashSet<&str> = changes
        .workers
        .iter()
        .map(|(k, _)| *k)
        .chain(changes.pristine.iter().map(|(k, _)| k.as_str()))
        .collect();
    let workers = merge_rows(
        WORKERS,
        &workers,
        |row| {
            RowKeys::of(row)
                .worker_id
                .is_some_and(|k| worker_keys.contains(&*k))
        },
        |doc| {
            apply_worker_patches(doc, changes.workers.iter().copied());
            for (key, reason) in changes.pristine {
                mark_pristine_not_run(doc, key, reason);
            }
            Ok(())
        },
    )?;

    let dispatches = rows_of(WORKER_DISPATCHES)?;
    let dispatch_keys: HashSet<String> = changes
        .dispatches
        .iter()
        .filter_map(dispatch_row_key)
        .collect();
    let dispatches = merge_rows(
        WORKER_DISPATCHES,
        &dispatches,
        |row| {
            RowKeys::of(row)
                .dispatch_key()
                .is_some_and(|k| dispatch_keys.contains(&k))
        },
        |doc| {
            upsert_dispatches(doc, changes.dispatches.iter().cloned());
            Ok(())
        },
    )?;

    let attempts = rows_of(ATTEMPTS)?;
    let attempt_ids: HashSet<&AttemptId> = changes.attempts.iter().map(|(id, _)| *id).collect();
    let mut drift = Ok(());
    let attempts = merge_rows(
        ATTEMPTS,
        &attempts,
        |row| {
            RowKeys::of(row)
                .attempt_id()
                .is_some_and(|id| attempt_ids.contains(&id))
        },
        |doc| {
            drift = apply_attempt_patches(doc, changes.attempts.iter().copied());
            Ok(())
        },
    )?;
    let mut keys: Vec<String> = top.keys().map(|k| k.to_string()).collect();
    if !changes.attempts.is_empty() && !top.contains_key(ATTEMPTS) {
        keys.push(ATTEMPTS.to_string());
    }
    keys.sort_unstable();
    Ok(Merged {
        top,
        keys,
        workers,
        dispatches,
        attempts,
        drift,
    })
}

impl Merged<'_> {
    /// The document, one key a line, one row a line in each merged array.
    pub fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(b"{")?;
        for (i, key) in self.keys.iter().enumerate() {
            out.write_all(if i == 0 { b"\n  " } else { b",\n  " })?;
            serde_json::to_writer(&mut *out, key)?;
            out.write_all(b": ")?;
            match key.as_str() {
                WORKERS => write_rows(out, &self.workers)?,
                WORKER_DISPATCHES => write_rows(out, &self.dispatches)?,
                ATTEMPTS => write_rows(out, &self.attempts)?,
                other => out.write_all(self.top[other].get().as_bytes())?,
            }
        }
        out.write_all(b"\n}\n")
    }
}

/// A row as written: the old text, or a changed row.
enum Row<'a> {
    Old(&'a RawValue),
    New(Value),
}

/// The rows of one array after `apply` changed the rows `touched` selects
/// (and appended new ones). The rules run on a small document holding just
/// those rows, in their order; they change rows in place and append.
fn merge_rows<'a>(
    key: &str,
    rows: &[&'a RawValue],
    touched: impl Fn(&RawValue) -> bool,
    apply: impl FnOnce(&mut Value) -> Result<(), StateError>,
) -> Result<Vec<Row<'a>>, StateError> {
    let picked: Vec<usize> = (0..rows.len()).filter(|&i| touched(rows[i])).collect();
    let mut doc = serde_json::json!({ key: [] });
    {
        let list = doc[key].as_array_mut().expect("made above");
        for &i in &picked {
            list.push(serde_json::from_str(rows[i].get()).unwrap_or(Value::Null));
        }
    }
    apply(&mut doc)?;
    let Value::Array(mut changed) = doc[key].take() else {
        return Ok(rows.iter().map(|r| Row::Old(r)).collect());
    };
    let appended = changed.split_off(picked.len().min(changed.len()));
    let mut by_index: HashMap<usize, Value> = picked.into_iter().zip(changed).collect();
    let mut out: Vec<Row> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| match by_index.remove(&i) {
            Some(v) => Row::New(v),
            None => Row::Old(r),
        })
        .collect();
    out.extend(appended.into_iter().map(Row::New));
    Ok(out)
}

fn write_rows(out: &mut dyn Write, rows: &[Row]) -> io::Result<()> {
    if rows.is_empty() {
        return out.write_all(b"[]");
    }
    out.write_all(b"[")?;
    for (i, row) in rows.iter().enumerate() {
        out.write_all(if i == 0 { b"\n    " } else { b",\n    " })?;
        match row {
            Row::Old(raw) => out.write_all(raw.get().as_bytes())?,
            Row::New(v) => serde_json::to_writer(&mut *out, v)?,
        }
    }
    out.write_all(b"\n  ]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::team_state::{worker_status_change, WorkerStatus};
    use serde_json::json;

    fn merged(
        old: &str,
        changes: &Changes,
    ) -> Result<(String, Result<(), StateError>), StateError> {
        let empty = RawValue::from_string("[]".into()).unwrap();
        let m = merge(Path::new("t.json"), old.as_bytes(), &empty, changes)?;
        let mut out = Vec::new();
        m.write_to(&mut out).unwrap();
        Ok((String::from_utf8(out).unwrap(), m.drift))
    }

    fn none() -> Changes<'static> {
        Changes {
            workers: vec![],
            pristine: &[],
            dispatches: &[],
            attempts: vec![],
        }
    }

    #[test]
    fn untouched_rows_and_unknown_keys_are_kept_as_written() {
        let old = r#"{"zLead": {"note": "x y"}, "workers": [{"workerId": "a",  "status": "done-by-lead"}],
            "workerDispatches": [ {"dispatchId":"d1", "extra" : 1} ]}"#;
        let patch = WorkerPatch {
            ensure: None,
            change: worker_status_change(WorkerStatus::Completed, "", &Default::default(), "t"),
        };
        let rows = vec![json!({"dispatchId": "d2", "status": "running"})];
        let changes = Changes {
            workers: vec![("b", &patch)],
            pristine: &[],
            dispatches: &rows,
            attempts: vec![],
        };
        let (text, drift) = merged(old, &changes).unwrap();
        assert!(drift.is_ok());
        // Byte for byte, as another writer left them.
        assert!(
            text.contains(r#"{"workerId": "a",  "status": "done-by-lead"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"dispatchId":"d1", "extra" : 1}"#),
            "{text}"
        );
        assert!(text.contains(r#""zLead": {"note": "x y"}"#), "{text}");
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["workers"][1]["workerId"], "b");
        assert_eq!(doc["workers"][1]["status"], "completed");
        assert_eq!(doc["workerDispatches"][1]["dispatchId"], "d2");
        assert_eq!(doc["agentDispatches"], json!([]));
        assert!(doc.get("attempts").is_none());
    }

    #[test]
    fn a_touched_row_is_replaced_in_place() {
        let old = r#"{"workers": [], "workerDispatches": [{"dispatchId": "d1", "status": "running"}, {"dispatchId": "d9"}]}"#;
        let rows = vec![json!({"dispatchId": "d1", "status": "completed"})];
        let changes = Changes {
            dispatches: &rows,
            ..none()
        };
        let (text, _) = merged(old, &changes).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            doc["workerDispatches"],
            json!([{"dispatchId": "d1", "status": "completed"}, {"dispatchId": "d9"}])
        );
    }

    #[test]
    fn blank_or_missing_is_a_fresh_document_and_bad_shapes_are_refused() {
        let (text, _) = merged("  \n", &none()).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["workers"], json!([]));
        assert!(matches!(
            merged(r#"{"workers": {}}"#, &none()),
            Err(StateError::NotAnArray { .. })
        ));
        assert!(matches!(
            merged("[1]", &none()),
            Err(StateError::Parse { .. })
        ));
        assert!(matches!(
            merged("{oops", &none()),
            Err(StateError::Parse { .. })
        ));
    }
}
