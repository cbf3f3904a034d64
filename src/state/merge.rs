//! Merging a ledger's pending rows into team-state as a stream.
//!
//! Team-state of a run of 10,000 jobs is tens of megabytes; a
//! `serde_json::Value` of it is several times that, and even its text held
//! whole is a burst the size of the file at every flush. A flush only
//! touches the rows it has news for, so the file is read as a stream: each
//! top-level value and each row of `workers[]`, `workerDispatches[]` and
//! `attempts[]` passes through one at a time; a row that a pending change
//! names is parsed, changed by the same rules as ever
//! ([`super::team_state`], [`super::attempts`]) and written in its place;
//! rows nobody named yet are appended at the end of their array. Memory is
//! one row, whatever the file's size.

use super::attempts::{apply_attempt_patches, AttemptId, AttemptPatch};
use super::team_state::{
    apply_worker_patches, dispatch_row_key, mark_pristine_not_run, upsert_dispatches, WorkerPatch,
    ARRAY_KEYS, ATTEMPTS, WORKERS, WORKER_DISPATCHES,
};
use super::StateError;
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, Write};
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
pub(crate) struct RowKeys<'a> {
    #[serde(borrow, default)]
    pub worker_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub dispatch_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub plan_digest: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub worker_key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub status: Option<Cow<'a, str>>,
    #[serde(default)]
    pub attempt: Option<Value>,
}

impl<'a> RowKeys<'a> {
    pub(crate) fn of(row: &'a [u8]) -> RowKeys<'a> {
        serde_json::from_slice(row).unwrap_or_default()
    }

    fn attempt(&self) -> Option<u64> {
        self.attempt.as_ref().and_then(Value::as_u64)
    }

    /// The dispatch-row key of [`dispatch_row_key`], from the keys alone.
    pub(crate) fn dispatch_key(&self) -> Option<String> {
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

/// Which of the three merged arrays a key names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum List {
    Workers,
    Dispatches,
    Attempts,
}

impl List {
    fn of(key: &str) -> Option<List> {
        match key {
            WORKERS => Some(List::Workers),
            WORKER_DISPATCHES => Some(List::Dispatches),
            ATTEMPTS => Some(List::Attempts),
            _ => None,
        }
    }

    fn key(self) -> &'static str {
        match self {
            List::Workers => WORKERS,
            List::Dispatches => WORKER_DISPATCHES,
            List::Attempts => ATTEMPTS,
        }
    }
}

/// The merge state: which pending changes found their row yet.
struct Merger<'c, 'p> {
    changes: &'c Changes<'p>,
    workers: HashSet<&'p str>,
    dispatches: HashMap<String, usize>,
    attempts: HashSet<&'p AttemptId>,
    drift: Result<(), StateError>,
}

impl<'c, 'p> Merger<'c, 'p> {
    fn new(changes: &'c Changes<'p>) -> Self {
        let mut dispatches = HashMap::new();
        for (i, row) in changes.dispatches.iter().enumerate() {
            if let Some(k) = dispatch_row_key(row) {
                // The last pending row of a key is the one that counts.
                dispatches.insert(k, i);
            }
        }
        Merger {
            changes,
            workers: changes
                .workers
                .iter()
                .map(|(k, _)| *k)
                .chain(changes.pristine.iter().map(|(k, _)| k.as_str()))
                .collect(),
            dispatches,
            attempts: changes.attempts.iter().map(|(id, _)| *id).collect(),
            drift: Ok(()),
        }
    }

    /// The row to write for `row` of `list`: `None` keeps it as it is.
    fn row(&mut self, list: List, row: &[u8]) -> Option<Value> {
        let keys = RowKeys::of(row);
        match list {
            List::Workers => {
                let key = keys.worker_id?;
                let key = self.workers.take(&*key)?;
                let mut doc = serde_json::json!({ WORKERS: [parse(row)] });
                self.apply_workers(&mut doc, Some(key));
                first(doc, WORKERS)
            }
            List::Dispatches => {
                let i = self.dispatches.remove(&keys.dispatch_key()?)?;
                Some(self.changes.dispatches[i].clone())
            }
            List::Attempts => {
                let id = keys.attempt_id()?;
                let id = self.attempts.take(&id)?;
                let mut doc = serde_json::json!({ ATTEMPTS: [parse(row)] });
                let patches = self
                    .changes
                    .attempts
                    .iter()
                    .filter(|(i, _)| *i == id)
                    .copied();
                self.note(apply_attempt_patches(&mut doc, patches));
                first(doc, ATTEMPTS)
            }
        }
    }

    /// What no row of `list` was found for: new rows, in order.
    fn rest(&mut self, list: List) -> Vec<Value> {
        let mut doc = serde_json::json!({ list.key(): [] });
        match list {
            List::Workers => self.apply_workers(&mut doc, None),
            List::Dispatches => {
                let mut left: Vec<usize> = self.dispatches.drain().map(|(_, i)| i).collect();
                left.sort_unstable();
                let rows = left.into_iter().map(|i| self.changes.dispatches[i].clone());
                // Rows without a key have nothing to be recognised by: each
                // is appended.
                let keyless = self
                    .changes
                    .dispatches
                    .iter()
                    .filter(|r| dispatch_row_key(r).is_none())
                    .cloned();
                upsert_dispatches(&mut doc, rows.chain(keyless));
            }
            List::Attempts => {
                let left = std::mem::take(&mut self.attempts);
                let patches = self
                    .changes
                    .attempts
                    .iter()
                    .filter(|(id, _)| left.contains(id))
                    .copied();
                let drift = apply_attempt_patches(&mut doc, patches);
                self.note(drift);
            }
        }
        match doc[list.key()].take() {
            Value::Array(rows) => rows,
            _ => Vec::new(),
        }
    }

    /// The worker patches and pristine reasons for `only` (one row's key),
    /// or for every key not found yet.
    fn apply_workers(&mut self, doc: &mut Value, only: Option<&str>) {
        let wanted = |k: &str| match only {
            Some(o) => k == o,
            None => self.workers.contains(k),
        };
        let patches: Vec<(&str, &WorkerPatch)> = self
            .changes
            .workers
            .iter()
            .filter(|(k, _)| wanted(k))
            .copied()
            .collect();
        apply_worker_patches(doc, patches);
        for (key, reason) in self.changes.pristine {
            if wanted(key) {
                mark_pristine_not_run(doc, key, reason);
            }
        }
        if only.is_none() {
            self.workers.clear();
        }
    }

    fn note(&mut self, drift: Result<(), StateError>) {
        if self.drift.is_ok() {
            self.drift = drift;
        }
    }
}

fn parse(row: &[u8]) -> Value {
    serde_json::from_slice(row).unwrap_or(Value::Null)
}

fn first(mut doc: Value, key: &str) -> Option<Value> {
    match doc[key].take() {
        Value::Array(mut rows) if !rows.is_empty() => Some(rows.swap_remove(0)),
        _ => None,
    }
}

/// Merge `changes` into the team-state read from `old` (an empty or blank
/// file: a fresh document) and write the result to `out`. The attempt
/// drift of [`apply_attempt_patches`], if any, comes back once everything
/// else was written. The old text's top-level keys keep their order.
pub fn merge(
    path: &Path,
    old: impl BufRead,
    changes: &Changes,
    out: &mut dyn Write,
) -> Result<Result<(), StateError>, StateError> {
    let io = |e: io::Error| StateError::io(path, e);
    let mut merger = Merger::new(changes);
    let mut doc = Members { out, first: true };
    doc.out.write_all(b"{").map_err(io)?;
    let seen = merge_members(path, &mut Scan::new(old), &mut merger, &mut doc)?;
    add_missing_lists(path, &seen, &mut merger, &mut doc)?;
    doc.out.write_all(b"\n}\n").map_err(io)?;
    Ok(merger.drift)
}

/// The merged document's top-level members as they are written.
struct Members<'o> {
    out: &'o mut dyn Write,
    /// No member written yet: the next key line takes no comma.
    first: bool,
}

impl Members<'_> {
    /// Start the member `key`: its key line, ready for the value.
    fn key(&mut self, key: &str) -> io::Result<()> {
        self.out
            .write_all(if self.first { b"\n  " } else { b",\n  " })?;
        self.first = false;
        serde_json::to_writer(&mut *self.out, key)?;
        self.out.write_all(b": ")
    }
}

/// The error for team-state text that is not the document it should be.
fn not_team_state(path: &Path, why: &str) -> StateError {
    StateError::Parse {
        path: path.to_path_buf(),
        source: serde::de::Error::custom(why),
    }
}

/// Copy the old text's members to `doc` in their order, merging the lists
/// that have pending rows; the keys seen. An empty or blank text has none.
fn merge_members(
    path: &Path,
    scan: &mut Scan<impl BufRead>,
    merger: &mut Merger,
    doc: &mut Members,
) -> Result<Vec<String>, StateError> {
    let io = |e: io::Error| StateError::io(path, e);
    let mut seen: Vec<String> = Vec::new();
    match scan.peek().map_err(io)? {
        None => return Ok(seen),
        Some(b'{') => scan.bump(),
        Some(_) => return Err(not_team_state(path, "team-state is not a JSON object")),
    }
    let mut buf = Vec::new();
    loop {
        match scan.peek().map_err(io)? {
            Some(b'}') => {
                scan.bump();
                break;
            }
            Some(b',') if !seen.is_empty() => scan.bump(),
            Some(b'"') => {}
            _ => return Err(not_team_state(path, "team-state is not a JSON object")),
        }
        let key = read_key(path, scan, &mut buf)?;
        doc.key(&key).map_err(io)?;
        merge_value(path, scan, merger, &key, &mut buf, doc.out)?;
        seen.push(key);
    }
    if scan.peek().map_err(io)?.is_some() {
        return Err(not_team_state(path, "text after the team-state object"));
    }
    Ok(seen)
}

/// The next member's key, read past the `:` that must follow it (`buf` is
/// scratch).
fn read_key(
    path: &Path,
    scan: &mut Scan<impl BufRead>,
    buf: &mut Vec<u8>,
) -> Result<String, StateError> {
    let io = |e: io::Error| StateError::io(path, e);
    buf.clear();
    scan.value(buf).map_err(io)?;
    let key: String = serde_json::from_slice(buf)
        .map_err(|_| not_team_state(path, "a key that is not a string"))?;
    if scan.peek().map_err(io)? != Some(b':') {
        return Err(not_team_state(path, "a key without a value"));
    }
    scan.bump();
    Ok(key)
}

/// Pass the value of member `key` from `scan` to `out`: a list with rows to
/// merge is merged, another well-known list must be an array, anything
/// else is copied as it is (`buf` is scratch).
fn merge_value(
    path: &Path,
    scan: &mut Scan<impl BufRead>,
    merger: &mut Merger,
    key: &str,
    buf: &mut Vec<u8>,
    out: &mut dyn Write,
) -> Result<(), StateError> {
    let io = |e: io::Error| StateError::io(path, e);
    match List::of(key) {
        Some(list) => merge_list(scan, merger, list, out, path),
        None if ARRAY_KEYS.contains(&key) => {
            buf.clear();
            scan.value(buf).map_err(io)?;
            if buf.first() != Some(&b'[') {
                return Err(StateError::NotAnArray {
                    path: path.to_path_buf(),
                    key: key.to_string(),
                });
            }
            out.write_all(buf).map_err(io)
        }
        None => scan.copy_value(out).map_err(io),
    }
}

/// Add the lists the file did not have (`seen` are the keys it had): the
/// well-known ones always, the merged ones when they have rows, and
/// `attempts` only then.
fn add_missing_lists(
    path: &Path,
    seen: &[String],
    merger: &mut Merger,
    doc: &mut Members,
) -> Result<(), StateError> {
    let io = |e: io::Error| StateError::io(path, e);
    for key in ARRAY_KEYS {
        if seen.iter().any(|k| k == key) {
            continue;
        }
        let rows = match List::of(key) {
            Some(list) => merger.rest(list),
            None => Vec::new(),
        };
        if key == ATTEMPTS && rows.is_empty() {
            continue;
        }
        doc.key(key).map_err(io)?;
        doc.out.write_all(b"[").map_err(io)?;
        write_rows(doc.out, rows.iter().map(Row::New), false).map_err(io)?;
        doc.out
            .write_all(if rows.is_empty() { b"]" } else { b"\n  ]" })
            .map_err(io)?;
    }
    Ok(())
}

/// What team-state's rows say of each dispatch and worker: the status of
/// each dispatch row (by its key) and of each worker row (by `workerId`),
/// read as a stream (for reconciling it with the events log).
#[derive(Debug, Default)]
pub struct Index {
    pub dispatches: HashMap<String, String>,
    pub workers: HashMap<String, String>,
}

pub fn index(path: &Path, old: impl BufRead) -> Result<Index, StateError> {
    let io = |e: io::Error| StateError::io(path, e);
    let bad = || StateError::Parse {
        path: path.to_path_buf(),
        source: serde::de::Error::custom("team-state is not a JSON object"),
    };
    let mut index = Index::default();
    let mut scan = Scan::new(old);
    match scan.peek().map_err(io)? {
        None => return Ok(index),
        Some(b'{') => scan.bump(),
        Some(_) => return Err(bad()),
    }
    let mut buf = Vec::new();
    let mut first = true;
    loop {
        match scan.peek().map_err(io)? {
            Some(b'}') => return Ok(index),
            Some(b',') if !first => scan.bump(),
            Some(b'"') if first => {}
            _ => return Err(bad()),
        }
        first = false;
        buf.clear();
        scan.value(&mut buf).map_err(io)?;
        let key: String = serde_json::from_slice(&buf).map_err(|_| bad())?;
        if scan.peek().map_err(io)? != Some(b':') {
            return Err(bad());
        }
        scan.bump();
        let list = List::of(&key).filter(|l| *l != List::Attempts);
        if list.is_none() || scan.peek().map_err(io)? != Some(b'[') {
            scan.copy_value(&mut io::sink()).map_err(io)?;
            continue;
        }
        scan.bump();
        let mut any = false;
        loop {
            match scan.peek().map_err(io)? {
                Some(b']') => {
                    scan.bump();
                    break;
                }
                Some(b',') if any => scan.bump(),
                Some(_) => {}
                None => return Err(bad()),
            }
            any = true;
            buf.clear();
            scan.value(&mut buf).map_err(io)?;
            let row = RowKeys::of(&buf);
            let status = row.status.as_deref().unwrap_or("").to_string();
            match list {
                Some(List::Workers) => {
                    if let Some(w) = row.worker_id.as_deref() {
                        index.workers.entry(w.to_string()).or_insert(status);
                    }
                }
                _ => {
                    if let Some(k) = row.dispatch_key() {
                        index.dispatches.entry(k).or_insert(status);
                    }
                }
            }
        }
    }
}

enum Row<'r> {
    Old(&'r [u8]),
    New(&'r Value),
}

/// Stream one merged array from `scan` to `out`.
fn merge_list(
    scan: &mut Scan<impl BufRead>,
    merger: &mut Merger,
    list: List,
    out: &mut dyn Write,
    path: &Path,
) -> Result<(), StateError> {
    let io = |e: io::Error| StateError::io(path, e);
    if scan.peek().map_err(io)? != Some(b'[') {
        return Err(StateError::NotAnArray {
            path: path.to_path_buf(),
            key: list.key().to_string(),
        });
    }
    scan.bump();
    out.write_all(b"[").map_err(io)?;
    let mut any = false;
    let mut row = Vec::new();
    loop {
        match scan.peek().map_err(io)? {
            Some(b']') => {
                scan.bump();
                break;
            }
            Some(b',') if any => scan.bump(),
            Some(_) => {}
            None => {
                return Err(StateError::NotAnArray {
                    path: path.to_path_buf(),
                    key: list.key().to_string(),
                })
            }
        }
        row.clear();
        scan.value(&mut row).map_err(io)?;
        let changed = merger.row(list, &row);
        let one = match &changed {
            Some(v) => Row::New(v),
            None => Row::Old(&row),
        };
        write_rows(out, std::iter::once(one), any).map_err(io)?;
        any = true;
    }
    let rest = merger.rest(list);
    write_rows(out, rest.iter().map(Row::New), any).map_err(io)?;
    out.write_all(if any || !rest.is_empty() {
        b"\n  ]"
    } else {
        b"]"
    })
    .map_err(io)
}

/// Rows, one a line; `more` when rows were written before these.
fn write_rows<'r>(
    out: &mut dyn Write,
    rows: impl Iterator<Item = Row<'r>>,
    more: bool,
) -> io::Result<()> {
    let mut more = more;
    for row in rows {
        out.write_all(if more { b",\n    " } else { b"\n    " })?;
        more = true;
        match row {
            Row::Old(raw) => out.write_all(raw)?,
            Row::New(v) => serde_json::to_writer(&mut *out, v)?,
        }
    }
    Ok(())
}

/// A JSON text read a value at a time: enough of a tokenizer to find where
/// each value ends (strings, escapes, nesting), not a parser. What a value
/// holds is judged by serde where it matters (keys, touched rows).
struct Scan<R> {
    r: R,
}

impl<R: BufRead> Scan<R> {
    fn new(r: R) -> Self {
        Scan { r }
    }

    /// The next byte that is not white space, not consumed.
    fn peek(&mut self) -> io::Result<Option<u8>> {
        loop {
            let buf = self.r.fill_buf()?;
            let Some(&b) = buf.first() else {
                return Ok(None);
            };
            if b.is_ascii_whitespace() {
                self.r.consume(1);
            } else {
                return Ok(Some(b));
            }
        }
    }

    fn bump(&mut self) {
        self.r.consume(1);
    }

    /// One value, appended to `buf` (white space inside it kept as it is).
    fn value(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        self.stream_value(&mut |bytes| {
            buf.extend_from_slice(bytes);
            Ok(())
        })
    }

    /// One value, copied to `out` without holding it.
    fn copy_value(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.stream_value(&mut |bytes| out.write_all(bytes))
    }

    fn stream_value(&mut self, sink: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        let unexpected = || io::Error::new(io::ErrorKind::InvalidData, "JSON ends inside a value");
        if self.peek()?.is_none() {
            return Err(unexpected());
        }
        let mut depth = 0usize;
        let mut in_string = false;
        let mut escaped = false;
        let mut started = false;
        loop {
            let buf = self.r.fill_buf()?;
            if buf.is_empty() {
                return if started && depth == 0 && !in_string {
                    Ok(())
                } else {
                    Err(unexpected())
                };
            }
            let mut end = None;
            for (i, &b) in buf.iter().enumerate() {
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    continue;
                }
                match b {
                    b'"' => {
                        in_string = true;
                        started = true;
                    }
                    b'{' | b'[' => {
                        depth += 1;
                        started = true;
                    }
                    b'}' | b']' if depth > 0 => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    // A scalar ends at the first delimiter after it.
                    b',' | b'}' | b']' | b':' if depth == 0 && started => {
                        end = Some(i);
                        break;
                    }
                    b if b.is_ascii_whitespace() && depth == 0 && started => {
                        end = Some(i);
                        break;
                    }
                    _ => started = true,
                }
            }
            match end {
                Some(n) => {
                    sink(&buf[..n])?;
                    self.r.consume(n);
                    return Ok(());
                }
                None => {
                    let n = buf.len();
                    sink(buf)?;
                    self.r.consume(n);
                }
            }
        }
    }
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
        let mut out = Vec::new();
        // A tiny buffer, so values cross buffer boundaries.
        let reader = io::BufReader::with_capacity(3, old.as_bytes());
        let drift = merge(Path::new("t.json"), reader, changes, &mut out)?;
        Ok((String::from_utf8(out).unwrap(), drift))
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
        let old = r#"{"zLead": {"note": "x, y]}"}, "workers": [{"workerId": "a",  "status": "done-by-lead"}],
            "workerDispatches": [ {"dispatchId":"d1", "extra" : [1, {"a": "}"}]} ], "n": 12, "t": true}"#;
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
            text.contains(r#"{"dispatchId":"d1", "extra" : [1, {"a": "}"}]}"#),
            "{text}"
        );
        assert!(text.contains(r#""zLead": {"note": "x, y]}"}"#), "{text}");
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["workers"][1]["workerId"], "b");
        assert_eq!(doc["workers"][1]["status"], "completed");
        assert_eq!(doc["workerDispatches"][1]["dispatchId"], "d2");
        assert_eq!(doc["agentDispatches"], json!([]));
        assert_eq!(doc["n"], 12);
        assert_eq!(doc["t"], true);
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
        assert!(merged("{oops", &none()).is_err());
        assert!(merged(r#"{"workers": [1, 2"#, &none()).is_err());
        assert!(merged(r#"{"a": 1} trailing"#, &none()).is_err());
    }
}
