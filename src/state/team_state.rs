//! The team-state document and the store that guards it
//! (docs/exec.md#what-is-written-when).
//!
//! The store owns the file discipline: every change happens under an
//! exclusive lock on `<team-state>.lock`, re-reads the file, and replaces it
//! whole. The free functions are the rules over the document itself; they do
//! no I/O so they can be tested, and reused by the [`super::Ledger`], as plain
//! data transformations.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_json::{json, Map, Value};

use super::StateError;
use crate::fsutil::{self, FileLock};

pub const WORKERS: &str = "workers";
pub const WORKER_DISPATCHES: &str = "workerDispatches";
pub const AGENT_DISPATCHES: &str = "agentDispatches";
pub const AGENT_RESULT_LINKS: &str = "agentResultLinks";
pub const ATTEMPTS: &str = "attempts";

/// Top-level keys that, when present, must hold arrays.
pub(crate) const ARRAY_KEYS: [&str; 5] = [
    WORKERS,
    WORKER_DISPATCHES,
    AGENT_DISPATCHES,
    AGENT_RESULT_LINKS,
    ATTEMPTS,
];

/// The rows of `workers` and `workerDispatches`, each as its JSON text
/// ([`TeamStateStore::read_rows`]).
#[derive(Debug, Default)]
pub struct Rows<'a> {
    pub workers: Vec<&'a serde_json::value::RawValue>,
    pub dispatches: Vec<&'a serde_json::value::RawValue>,
}

/// The document a run starts from when no team-state file exists yet.
pub fn fresh_document() -> Value {
    json!({
        WORKERS: [],
        WORKER_DISPATCHES: [],
        AGENT_DISPATCHES: [],
        AGENT_RESULT_LINKS: [],
    })
}

/// The team-state file of one run.
#[derive(Debug, Clone)]
pub struct TeamStateStore {
    path: PathBuf,
    /// Where the lock file is opened from, when no symlink may be followed
    /// on the way (exec's own files, docs/exec.md#never-through-a-symlink).
    below: Option<std::sync::Arc<crate::beneath::Beneath>>,
}

/// How long a writer waits for the team-state lock another writer (the
/// lead, another okstra) holds before giving up with its name:
/// `OKSTRA_LOCK_TIMEOUT_SECONDS`, default 30.
pub fn lock_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(
        std::env::var("OKSTRA_LOCK_TIMEOUT_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    )
}

impl TeamStateStore {
    /// A store for the file at `path`. Nothing is read or created yet.
    pub fn open(path: impl Into<PathBuf>) -> Self {
        TeamStateStore {
            path: path.into(),
            below: None,
        }
    }

    /// Open the lock file below `root`, never through a symlink.
    pub fn below(mut self, root: std::sync::Arc<crate::beneath::Beneath>) -> Self {
        self.below = Some(root);
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<team-state>.lock`: the lock every writer of this file takes.
    /// The lock an `okstra exec` holds for the whole run
    /// (docs/exec.md#before-anything-starts `exec/locked`), beside the
    /// per-write `<team-state>.lock`.
    pub fn exec_lock_path(&self) -> PathBuf {
        let mut name = OsString::from(self.path.as_os_str());
        name.push(".exec.lock");
        PathBuf::from(name)
    }

    pub fn lock_path(&self) -> PathBuf {
        let mut name = OsString::from(self.path.as_os_str());
        name.push(".lock");
        PathBuf::from(name)
    }

    /// Block until this process holds the team-state lock.
    /// Waits at most [`lock_timeout`]; then an error naming the holder.
    pub fn lock(&self) -> Result<FileLock, StateError> {
        let lock_path = self.lock_path();
        let locked = match &self.below {
            None => FileLock::acquire_within(&lock_path, lock_timeout()),
            Some(root) => root
                .relative(&lock_path)
                .and_then(|rel| root.open_file(rel, crate::beneath::WriteMode::Append))
                .map_err(std::io::Error::from)
                .and_then(|file| FileLock::file_within(file, &lock_path, lock_timeout())),
        };
        locked.map_err(|e| StateError::io(lock_path, e))
    }

    /// The current document. A missing (or blank) file reads as
    /// [`fresh_document`]; anything that is not a JSON object, or whose
    /// well-known lists are not arrays, is an error naming the file.
    ///
    /// Reading takes no lock: the file is only ever replaced by rename, so a
    /// reader always sees one whole version.
    pub fn read(&self) -> Result<Value, StateError> {
        let mut bytes = Vec::new();
        if !self.read_whole(&mut bytes)? {
            return Ok(fresh_document());
        }
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| self.parse_error(e))?;
        let Some(object) = doc.as_object() else {
            return Err(StateError::NotAnObject {
                path: self.path.clone(),
            });
        };
        for key in ARRAY_KEYS {
            if object.get(key).is_some_and(|v| !v.is_array()) {
                return Err(StateError::NotAnArray {
                    path: self.path.clone(),
                    key: key.to_string(),
                });
            }
        }
        Ok(doc)
    }

    /// Whether [`Self::read`] would succeed, found without building the
    /// document: the file is streamed through once and nothing of it is
    /// kept. exec checks a run's team-state this way before it starts (a
    /// 10,000-job run's is tens of megabytes, several times that as a tree);
    /// what it reads of it later, it streams too.
    pub fn check(&self) -> Result<(), StateError> {
        let Some(file) = self.open_content()? else {
            return Ok(());
        };
        let mut de = serde_json::Deserializer::from_reader(file);
        let shape = serde::Deserialize::deserialize(&mut de).and_then(|shape| {
            de.end()?;
            Ok(shape)
        });
        self.judge_shape(shape)
    }

    /// The verdict on a document of this `shape`.
    fn judge_shape(&self, shape: serde_json::Result<shape::Shape>) -> Result<(), StateError> {
        match shape.map_err(|e| self.parse_error(e))? {
            shape::Shape::NotAnObject => Err(StateError::NotAnObject {
                path: self.path.clone(),
            }),
            shape::Shape::Object { not_arrays } => {
                match ARRAY_KEYS.iter().find(|k| not_arrays.contains(**k)) {
                    Some(key) => Err(StateError::NotAnArray {
                        path: self.path.clone(),
                        key: key.to_string(),
                    }),
                    None => Ok(()),
                }
            }
        }
    }

    /// The `workers` and `workerDispatches` rows, each kept as its JSON
    /// text in `buf` (the file, read whole): what a reader that shows rows
    /// one at a time needs, without the whole document as a tree (a
    /// 10,000-job run's is over 100 MB). Refused as [`Self::read`] refuses;
    /// no file, or a blank one, has no rows.
    pub fn read_rows<'a>(&self, buf: &'a mut Vec<u8>) -> Result<Rows<'a>, StateError> {
        if !self.read_whole(buf)? {
            return Ok(Rows::default());
        }
        self.judge_shape(serde_json::from_slice(buf))?;
        let buf: &'a [u8] = buf;
        // Its keys as `read` takes them: unescaped, the last of a repeated
        // one standing.
        let top: std::collections::BTreeMap<String, &'a serde_json::value::RawValue> =
            serde_json::from_slice(buf).map_err(|e| self.parse_error(e))?;
        let rows = |key: &str| match top.get(key) {
            Some(raw) => serde_json::from_str(raw.get()).map_err(|e| self.parse_error(e)),
            None => Ok(Vec::new()),
        };
        Ok(Rows {
            workers: rows(WORKERS)?,
            dispatches: rows(WORKER_DISPATCHES)?,
        })
    }

    /// The file read whole into `buf`; `false` where it is missing or blank
    /// (a fresh document).
    fn read_whole(&self, buf: &mut Vec<u8>) -> Result<bool, StateError> {
        buf.clear();
        match std::fs::File::open(&self.path) {
            Ok(mut file) => io::Read::read_to_end(&mut file, buf),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
        .map_err(|e| StateError::io(&self.path, e))?;
        Ok(!buf.iter().all(u8::is_ascii_whitespace))
    }

    /// The file, read from its start, where it has content: `None` where it
    /// is missing or blank (a fresh document).
    fn open_content(&self) -> Result<Option<io::BufReader<std::fs::File>>, StateError> {
        use io::{BufRead, Seek};
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => io::BufReader::new(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StateError::io(&self.path, e)),
        };
        loop {
            let buf = file.fill_buf().map_err(|e| StateError::io(&self.path, e))?;
            if buf.is_empty() {
                return Ok(None);
            }
            if !buf.iter().all(u8::is_ascii_whitespace) {
                break;
            }
            let n = buf.len();
            file.consume(n);
        }
        // From the start again, so that an error's line and column are the
        // file's own.
        file.rewind().map_err(|e| StateError::io(&self.path, e))?;
        Ok(Some(file))
    }

    fn parse_error(&self, source: serde_json::Error) -> StateError {
        StateError::Parse {
            path: self.path.clone(),
            source,
        }
    }

    /// Replace the file with `doc`. Callers must hold [`Self::lock`].
    pub(crate) fn write_locked(&self, doc: &Value) -> Result<(), StateError> {
        self.write_locked_via(doc, &mut Vec::new())
    }

    /// [`Self::write_locked`], serialising into `buf` (cleared first): a
    /// caller that rewrites a large file often keeps one buffer, instead of
    /// growing a new one, page by fresh page, every time.
    pub(crate) fn write_locked_via(
        &self,
        doc: &Value,
        buf: &mut Vec<u8>,
    ) -> Result<(), StateError> {
        buf.clear();
        serde_json::to_writer_pretty(&mut *buf, doc).map_err(|e| self.parse_error(e))?;
        buf.push(b'\n');
        fsutil::write_atomic(&self.path, buf, fsutil::Durability::Fsync)
            .map_err(|e| StateError::io(&self.path, e))
    }

    /// Lock, read, apply `f`, write the result back whole, unlock.
    ///
    /// Because the read happens under the lock, an update another writer made
    /// a moment ago is part of what `f` sees and is written back with it.
    pub fn mutate<R>(&self, f: impl FnOnce(&mut Value) -> R) -> Result<R, StateError> {
        let _lock = self.lock()?;
        let mut doc = self.read()?;
        let out = f(&mut doc);
        self.write_locked(&doc)?;
        Ok(out)
    }
}

/// A worker's status in the `workers[]` table, serialised as its wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerStatus {
    NotRun,
    InProgress,
    Completed,
    Timeout,
    Error,
}

impl WorkerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerStatus::NotRun => "not-run",
            WorkerStatus::InProgress => "in-progress",
            WorkerStatus::Completed => "completed",
            WorkerStatus::Timeout => "timeout",
            WorkerStatus::Error => "error",
        }
    }

    /// Completed, timed out or failed: the worker will not move on its own.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WorkerStatus::Completed | WorkerStatus::Timeout | WorkerStatus::Error
        )
    }
}

impl fmt::Display for WorkerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkerStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "not-run" => WorkerStatus::NotRun,
            "in-progress" => WorkerStatus::InProgress,
            "completed" => WorkerStatus::Completed,
            "timeout" => WorkerStatus::Timeout,
            "error" => WorkerStatus::Error,
            other => return Err(format!("unknown worker status `{other}`")),
        })
    }
}

/// Field-level edits to one `workers[]` row: keys to set and keys to remove.
/// A key is in at most one of the two.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerChange {
    pub set: Map<String, Value>,
    pub unset: BTreeSet<String>,
}

impl WorkerChange {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.unset.is_empty()
    }

    fn set(&mut self, key: &str, value: Value) {
        self.unset.remove(key);
        self.set.insert(key.to_string(), value);
    }

    fn unset(&mut self, key: &str) {
        self.set.remove(key);
        self.unset.insert(key.to_string());
    }

    /// Fold a later change into this one, so applying the result equals
    /// applying both in order.
    pub fn then(&mut self, later: WorkerChange) {
        for key in later.unset {
            self.unset(&key);
        }
        for (key, value) in later.set {
            self.set(&key, value);
        }
    }

    pub fn apply(&self, row: &mut Map<String, Value>) {
        for key in &self.unset {
            row.remove(key);
        }
        for (key, value) in &self.set {
            row.insert(key.clone(), value.clone());
        }
    }
}

/// The edits that move a worker row to `status` at time `now`.
///
/// `not-run` and the terminal statuses carry `reason` (possibly empty);
/// `in-progress` stamps `startedAt` and drops any stale reason and `endedAt`;
/// terminal statuses stamp `endedAt`; `not-run` clears both stamps. `extra`
/// fields are set too, but cannot override the fields this rule manages.
pub fn worker_status_change(
    status: WorkerStatus,
    reason: &str,
    extra: &Map<String, Value>,
    now: &str,
) -> WorkerChange {
    let mut change = WorkerChange::default();
    for (key, value) in extra {
        change.set(key, value.clone());
    }
    change.set("status", json!(status.as_str()));
    match status {
        WorkerStatus::NotRun => {
            change.set("reason", json!(reason));
            change.unset("startedAt");
            change.unset("endedAt");
        }
        WorkerStatus::InProgress => {
            change.set("startedAt", json!(now));
            change.unset("endedAt");
            change.unset("reason");
        }
        WorkerStatus::Completed | WorkerStatus::Timeout | WorkerStatus::Error => {
            change.set("reason", json!(reason));
            change.set("endedAt", json!(now));
        }
    }
    change
}

/// What one writer wants done to one worker's row: create it (with these
/// fields) if it is missing, then apply `change`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerPatch {
    pub ensure: Option<Map<String, Value>>,
    pub change: WorkerChange,
}

impl WorkerPatch {
    /// Fold a later patch into this one. The first `ensure` wins: it only
    /// matters when the row is missing, and then the earliest intent created it.
    pub fn then(&mut self, later: WorkerPatch) {
        if self.ensure.is_none() {
            self.ensure = later.ensure;
        }
        self.change.then(later.change);
    }
}

/// Make `doc` an object and return the array under `key`, creating it if
/// missing. Documents from [`TeamStateStore::read`] are already the right
/// shape; anything else is coerced rather than refused.
pub(crate) fn rows_mut<'a>(doc: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Value::Object(object) = doc else {
        unreachable!("made an object above")
    };
    let slot = object
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    let Value::Array(rows) = slot else {
        unreachable!("made an array above")
    };
    rows
}

pub(crate) fn rows<'a>(doc: &'a Value, key: &str) -> &'a [Value] {
    doc.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A row's `dispatchId` when it is a non-empty string.
fn dispatch_id_of(row: &Value) -> Option<&str> {
    row.get("dispatchId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
}

/// What a dispatch row is recognised by when it is recorded again: its
/// `dispatchId`; or, for a job without an invocation, the plan, worker and
/// attempt okstra stamped on it (`planDigest`, `workerKey`, `attempt`). A row
/// with neither has nothing to be recognised by and is appended.
pub fn dispatch_row_key(row: &Value) -> Option<String> {
    if let Some(id) = dispatch_id_of(row) {
        return Some(id.to_string());
    }
    let plan = row
        .get("planDigest")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())?;
    let key = row.get("workerKey").and_then(Value::as_str)?;
    let attempt = row.get("attempt").and_then(Value::as_u64)?;
    Some(format!("{plan}#{key}#{attempt}"))
}

/// Record one dispatch row: see [`upsert_dispatches`].
pub fn upsert_dispatch(doc: &mut Value, row: Value) {
    upsert_dispatches(doc, std::iter::once(row));
}

/// Record dispatch rows in `workerDispatches`, in order. A row with a
/// non-empty `dispatchId` replaces the row already holding that id (the
/// first, should the file hold several); a row without one is appended, since
/// there is nothing to recognise it by.
pub fn upsert_dispatches(doc: &mut Value, new_rows: impl IntoIterator<Item = Value>) {
    let rows = rows_mut(doc, WORKER_DISPATCHES);
    let mut slot: HashMap<String, usize> = HashMap::new();
    for (index, row) in rows.iter().enumerate() {
        if let Some(id) = dispatch_row_key(row) {
            slot.entry(id).or_insert(index);
        }
    }
    for row in new_rows {
        match dispatch_row_key(&row) {
            Some(id) => match slot.get(&id) {
                Some(&index) => rows[index] = row,
                None => {
                    slot.insert(id, rows.len());
                    rows.push(row);
                }
            },
            None => rows.push(row),
        }
    }
}

fn worker_key_of(row: &Value) -> Option<&str> {
    row.get("workerId").and_then(Value::as_str)
}

/// Apply worker patches to `workers[]`, in order, creating rows as asked.
///
/// A missing row is created as `{workerId, status: "not-run", ...ensure}`
/// when the patch ensures it, or as `{workerId}` plus the change when the
/// change has something to say; `workerId` is always the key.
pub fn apply_worker_patches<'p>(
    doc: &mut Value,
    patches: impl IntoIterator<Item = (&'p str, &'p WorkerPatch)>,
) {
    let rows = rows_mut(doc, WORKERS);
    let mut slot: HashMap<String, usize> = HashMap::new();
    for (index, row) in rows.iter().enumerate() {
        if let Some(key) = worker_key_of(row) {
            slot.entry(key.to_string()).or_insert(index);
        }
    }
    for (key, patch) in patches {
        let index = match slot.get(key) {
            Some(&index) => index,
            None => {
                let mut row = Map::new();
                match &patch.ensure {
                    Some(fields) => {
                        row.insert("status".into(), json!(WorkerStatus::NotRun.as_str()));
                        row.extend(fields.clone());
                    }
                    None if patch.change.is_empty() => continue,
                    None => {}
                }
                row.insert("workerId".into(), json!(key));
                slot.insert(key.to_string(), rows.len());
                rows.push(Value::Object(row));
                rows.len() - 1
            }
        };
        if let Value::Object(row) = &mut rows[index] {
            patch.change.apply(row);
        }
    }
}

/// Add a `workers[]` row for `key` if there is none. Returns whether one was
/// added.
pub fn ensure_worker(doc: &mut Value, key: &str, fields: &Map<String, Value>) -> bool {
    if find_worker(doc, key).is_some() {
        return false;
    }
    let patch = WorkerPatch {
        ensure: Some(fields.clone()),
        change: WorkerChange::default(),
    };
    apply_worker_patches(doc, [(key, &patch)]);
    true
}

/// Move worker `key` to `status` now (see [`worker_status_change`]),
/// creating its row if it has none.
pub fn set_worker_status(
    doc: &mut Value,
    key: &str,
    status: WorkerStatus,
    reason: &str,
    extra: &Map<String, Value>,
) {
    let patch = WorkerPatch {
        ensure: None,
        change: worker_status_change(status, reason, extra, &crate::clock::now()),
    };
    apply_worker_patches(doc, [(key, &patch)]);
}

/// Give a skip reason to a worker that was never touched: only a row that is
/// still `not-run` with an empty reason is changed. Returns whether it was.
/// A worker without a row is left alone.
pub fn mark_pristine_not_run(doc: &mut Value, key: &str, reason: &str) -> bool {
    let pristine = find_worker(doc, key).is_some_and(|row| {
        row.get("status").and_then(Value::as_str) == Some(WorkerStatus::NotRun.as_str())
            && row
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
    });
    if pristine {
        set_worker_status(doc, key, WorkerStatus::NotRun, reason, &Map::new());
    }
    pristine
}

/// The `workers[]` row for `key`.
pub fn find_worker<'a>(doc: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    rows(doc, WORKERS)
        .iter()
        .find(|row| worker_key_of(row) == Some(key))
        .and_then(Value::as_object)
}

/// The dispatch row holding `dispatch_id`, looked up in `workerDispatches`
/// and then in `agentDispatches`.
pub fn find_dispatch<'a>(doc: &'a Value, dispatch_id: &str) -> Option<&'a Value> {
    [WORKER_DISPATCHES, AGENT_DISPATCHES]
        .into_iter()
        .flat_map(|key| rows(doc, key))
        .find(|row| dispatch_id_of(row) == Some(dispatch_id))
}

/// Every non-empty dispatch id recorded in `workerDispatches` or
/// `agentDispatches`.
pub fn dispatch_ids(doc: &Value) -> HashSet<String> {
    [WORKER_DISPATCHES, AGENT_DISPATCHES]
        .into_iter()
        .flat_map(|key| rows(doc, key))
        .filter_map(dispatch_id_of)
        .map(str::to_string)
        .collect()
}

/// The run's records as planning asks for them, from team-state files.
pub struct FromTeamState;

/// What `okstra plan` hands the compiler: team-state as exec keeps it.
pub static RUN_RECORDS: FromTeamState = FromTeamState;

impl crate::model::Records for FromTeamState {
    fn dispatch_ids(&self, path: &Path) -> Result<HashSet<String>, String> {
        let doc = TeamStateStore::open(path.to_path_buf())
            .read()
            .map_err(|e| e.to_string())?;
        Ok(dispatch_ids(&doc))
    }
}

/// Record a roster plan's pre-run skips (docs/manifest.md#roster-mode): each
/// skipped worker (name, reason) whose row is still pristine (`not-run`, no
/// reason) gets its reason, under the team-state lock. The one thing
/// `okstra plan` writes besides the plan; nothing is written when no row
/// would change. Returns the workers marked.
pub fn record_skips(path: &Path, skips: &[(String, String)]) -> Result<Vec<String>, StateError> {
    let store = TeamStateStore::open(path.to_path_buf());
    let pristine = |doc: &Value, w: &str| {
        find_worker(doc, w).is_some_and(|row| {
            row.get("status")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
                == Some(WorkerStatus::NotRun)
                && row
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
        })
    };
    let current = store.read()?;
    if !skips.iter().any(|(w, _)| pristine(&current, w)) {
        return Ok(Vec::new());
    }
    store.mutate(|doc| {
        skips
            .iter()
            .filter(|(w, reason)| mark_pristine_not_run(doc, w, reason))
            .map(|(w, _)| w.clone())
            .collect()
    })
}

/// The shape [`TeamStateStore::check`] reads a document for, and the
/// visitors that read any JSON value to its end keeping nothing.
mod shape {
    use super::ARRAY_KEYS;
    use crate::json_past::{past_map, past_seq, scalar_visits};
    use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::collections::BTreeSet;
    use std::fmt;

    /// A document's shape: not an object, or an object and which of its
    /// well-known lists (as written last, where a key is given twice) are
    /// not arrays.
    pub enum Shape {
        NotAnObject,
        Object { not_arrays: BTreeSet<String> },
    }

    /// What kind of JSON value was read, to its end, keeping nothing of
    /// it. Every value is asked for as itself (`deserialize_any`), as
    /// parsing into a `serde_json::Value` asks: the same documents are
    /// accepted (a number out of range is refused here too, where skipping
    /// it would not).
    #[derive(PartialEq)]
    enum Kind {
        Scalar,
        Array,
        Object,
    }

    impl<'de> Deserialize<'de> for Kind {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Kind;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any JSON value")
                }
                scalar_visits!(_what => Kind::Scalar);
                fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Kind, A::Error> {
                    past_seq::<Kind, _>(seq).map(|()| Kind::Array)
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Kind, A::Error> {
                    past_map::<Kind, _>(map).map(|()| Kind::Object)
                }
            }
            d.deserialize_any(V)
        }
    }

    impl<'de> Deserialize<'de> for Shape {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Shape, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Shape;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any JSON value")
                }
                scalar_visits!(_what => Shape::NotAnObject);
                fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Shape, A::Error> {
                    past_seq::<Kind, _>(seq).map(|()| Shape::NotAnObject)
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
                    let mut not_arrays = BTreeSet::new();
                    while let Some(key) = map.next_key::<String>()? {
                        if ARRAY_KEYS.contains(&key.as_str()) {
                            if map.next_value::<Kind>()? == Kind::Array {
                                not_arrays.remove(&key);
                            } else {
                                not_arrays.insert(key);
                            }
                        } else {
                            map.next_value::<Kind>()?;
                        }
                    }
                    Ok(Shape::Object { not_arrays })
                }
            }
            d.deserialize_any(V)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn check_accepts_and_refuses_what_read_does() {
        // `check` streams where `read` builds the document: for each file,
        // the same verdict, and the same error (kind, key, message, line; a
        // reader may place a column one byte later than a slice does).
        let verdict = |r: Result<(), StateError>| match r {
            Ok(()) => "ok".to_string(),
            Err(StateError::NotAnArray { key, .. }) => format!("not an array: {key}"),
            Err(e) => {
                let text = e.to_string();
                text.split(" column ")
                    .next()
                    .unwrap_or_default()
                    .to_string()
            }
        };
        let cases = [
            "",
            " \n\t\n",
            "{}",
            "\n\n  {\"workers\": [], \"extra\": {\"a\": [1, {\"b\": null}]}}",
            "{\"workers\": [{\"key\": \"a\"}], \"attempts\": []}",
            "[]",
            "null",
            "\"text\"",
            "12",
            "{\"workers\": {}}",
            "{\"attempts\": 1, \"workers\": \"x\"}",
            "{\"workers\": 1, \"workers\": []}",
            "{\"workers\": [], \"workers\": true}",
            "{\"other\": 1e400}",
            "{\"workers\": [1e400]}",
            "{\"workers\": []} trailing",
            "{\"workers\": [}",
            "\n{ not json",
            "{\"a\": 1,}",
        ];
        let dir = tempfile::tempdir().unwrap();
        let store = TeamStateStore::open(dir.path().join("team-state.json"));
        let mut buf = Vec::new();
        for text in cases {
            std::fs::write(store.path(), text).unwrap();
            let read = verdict(store.read().map(drop));
            assert_eq!(verdict(store.check()), read, "{text:?}");
            let rows = verdict(store.read_rows(&mut buf).map(drop));
            assert_eq!(rows, read, "read_rows of {text:?}");
        }
        // A long blank start, past one buffer, is still blank.
        std::fs::write(store.path(), " ".repeat(20_000)).unwrap();
        assert_eq!(verdict(store.check()), "ok");
        std::fs::write(store.path(), format!("{}[]", "\n".repeat(20_000))).unwrap();
        assert_eq!(verdict(store.check()), verdict(store.read().map(drop)));
        assert!(verdict(store.check()).contains("does not hold a JSON object"));
    }

    #[test]
    fn read_rows_keeps_each_row_as_read_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = TeamStateStore::open(dir.path().join("team-state.json"));
        let mut buf = Vec::new();
        let texts = |rows: &[&serde_json::value::RawValue]| -> Vec<Value> {
            rows.iter()
                .map(|r| serde_json::from_str(r.get()).unwrap())
                .collect()
        };
        // No file, and a blank one: no rows.
        let rows = store.read_rows(&mut buf).unwrap();
        assert!(rows.workers.is_empty() && rows.dispatches.is_empty());
        std::fs::write(store.path(), "\n \n").unwrap();
        assert!(store.read_rows(&mut buf).unwrap().workers.is_empty());
        // Rows as `read` has them: an escaped key unescaped, the last of a
        // repeated key standing, other keys passed over.
        let text = r#"{
            "workers": [{"workerId": "old"}],
            "attempts": [{"big": [1, 2, 3]}],
            "work\u0065rs": [{"workerId": "a", "n": 1.5}, {"workerId": "b"}],
            "workerDispatches": [{"dispatchId": "d1", "usage": {"inputTokens": 3}}]
        }"#;
        std::fs::write(store.path(), text).unwrap();
        let doc = store.read().unwrap();
        let rows = store.read_rows(&mut buf).unwrap();
        assert_eq!(texts(&rows.workers), doc[WORKERS].as_array().unwrap()[..]);
        assert_eq!(
            texts(&rows.dispatches),
            doc[WORKER_DISPATCHES].as_array().unwrap()[..]
        );
        assert_eq!(rows.workers.len(), 2);
    }

    #[test]
    fn missing_file_reads_fresh_and_lock_path_is_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = TeamStateStore::open(dir.path().join("team-state.json"));
        assert_eq!(store.read().unwrap(), fresh_document());
        assert_eq!(store.lock_path(), dir.path().join("team-state.json.lock"));
    }

    #[test]
    fn non_object_and_bad_shapes_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ts.json");
        let store = TeamStateStore::open(&path);

        std::fs::write(&path, "[1, 2]").unwrap();
        let err = store.read().unwrap_err();
        assert!(matches!(err, StateError::NotAnObject { .. }));
        assert!(err.to_string().contains("ts.json"), "{err}");

        std::fs::write(&path, "{\"workers\": {}}").unwrap();
        let err = store.read().unwrap_err();
        assert!(matches!(err, StateError::NotAnArray { .. }), "{err}");

        std::fs::write(&path, "{\"workers\": [").unwrap();
        let err = store.read().unwrap_err();
        assert!(matches!(err, StateError::Parse { .. }));
        assert!(err.to_string().contains("ts.json"), "{err}");
    }

    #[test]
    fn mutate_creates_the_run_dir_and_writes_pretty_json() {
        let dir = tempfile::tempdir().unwrap();
        let store = TeamStateStore::open(dir.path().join("run/state/team-state.json"));
        let n = store
            .mutate(|doc| {
                ensure_worker(doc, "codex", &Map::new());
                rows(doc, WORKERS).len()
            })
            .unwrap();
        assert_eq!(n, 1);
        let text = std::fs::read_to_string(store.path()).unwrap();
        assert!(
            text.ends_with("}\n") && text.contains("\n  \"workers\""),
            "{text}"
        );
        assert_eq!(
            find_worker(&store.read().unwrap(), "codex").unwrap()["status"],
            "not-run"
        );
    }

    #[test]
    fn concurrent_mutations_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("team-state.json");
        let threads = 12;
        let per_thread = 10;
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let store = TeamStateStore::open(path);
                    barrier.wait();
                    for i in 0..per_thread {
                        store
                            .mutate(|doc| {
                                upsert_dispatch(doc, json!({"dispatchId": format!("{t}:{i}")}))
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let doc = TeamStateStore::open(&path).read().unwrap();
        assert_eq!(dispatch_ids(&doc).len(), threads * per_thread);
        assert_eq!(rows(&doc, WORKER_DISPATCHES).len(), threads * per_thread);
    }

    /// Run as a child process by `concurrent_processes_lose_nothing`; a
    /// no-op when run on its own.
    #[test]
    fn child_process_mutator() {
        let (Ok(path), Ok(tag)) = (
            std::env::var("OKSTRA_TEST_TEAM_STATE"),
            std::env::var("OKSTRA_TEST_TAG"),
        ) else {
            return;
        };
        let store = TeamStateStore::open(path);
        for i in 0..20 {
            store
                .mutate(|doc| upsert_dispatch(doc, json!({"dispatchId": format!("{tag}:{i}")})))
                .unwrap();
        }
    }

    #[test]
    fn concurrent_processes_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("team-state.json");
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..4)
            .map(|tag| {
                std::process::Command::new(&exe)
                    .args([
                        "--exact",
                        "state::team_state::tests::child_process_mutator",
                        "--test-threads=1",
                    ])
                    .env("OKSTRA_TEST_TEAM_STATE", &path)
                    .env("OKSTRA_TEST_TAG", format!("p{tag}"))
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let doc = TeamStateStore::open(&path).read().unwrap();
        assert_eq!(dispatch_ids(&doc).len(), 80);
    }

    #[test]
    fn dispatch_with_id_replaces_and_without_id_appends() {
        let mut doc = fresh_document();
        upsert_dispatch(
            &mut doc,
            json!({"dispatchId": "inv-1:attempt-1", "status": "in-progress"}),
        );
        upsert_dispatch(&mut doc, json!({"workerId": "claude"}));
        upsert_dispatch(
            &mut doc,
            json!({"dispatchId": "inv-1:attempt-1", "status": "completed"}),
        );
        upsert_dispatch(&mut doc, json!({"workerId": "claude"}));
        upsert_dispatch(&mut doc, json!({"dispatchId": "", "workerId": "gemini"}));
        let rows = rows(&doc, WORKER_DISPATCHES);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0]["status"], "completed");
        assert_eq!(
            find_dispatch(&doc, "inv-1:attempt-1").unwrap()["status"],
            "completed"
        );
        assert!(find_dispatch(&doc, "").is_none());
    }

    #[test]
    fn dispatch_ids_span_worker_and_agent_dispatches() {
        let doc = json!({
            "workerDispatches": [{"dispatchId": "a"}, {"dispatchId": ""}, {}],
            "agentDispatches": [{"dispatchId": "b"}, "junk"],
        });
        let ids = dispatch_ids(&doc);
        assert_eq!(ids, HashSet::from(["a".to_string(), "b".to_string()]));
        assert!(find_dispatch(&doc, "b").is_some());
    }

    #[test]
    fn ensure_worker_adds_once_with_fields() {
        let mut doc = fresh_document();
        assert!(ensure_worker(
            &mut doc,
            "codex",
            &map(json!({"role": "implementer"}))
        ));
        assert!(!ensure_worker(
            &mut doc,
            "codex",
            &map(json!({"role": "other"}))
        ));
        assert_eq!(rows(&doc, WORKERS).len(), 1);
        let row = find_worker(&doc, "codex").unwrap();
        assert_eq!(row["status"], "not-run");
        assert_eq!(row["role"], "implementer");
        assert_eq!(row["workerId"], "codex");
    }

    #[test]
    fn status_transitions_stamp_and_carry_reasons() {
        let mut doc = fresh_document();
        let extra = map(json!({"dispatchId": "d:attempt-1", "status": "bogus"}));
        set_worker_status(
            &mut doc,
            "claude",
            WorkerStatus::InProgress,
            "ignored",
            &extra,
        );
        let row = find_worker(&doc, "claude").unwrap();
        assert_eq!(row["status"], "in-progress");
        assert_eq!(row["dispatchId"], "d:attempt-1");
        assert!(row.contains_key("startedAt"));
        assert!(!row.contains_key("reason") && !row.contains_key("endedAt"));

        set_worker_status(&mut doc, "claude", WorkerStatus::Completed, "", &Map::new());
        let row = find_worker(&doc, "claude").unwrap();
        assert_eq!(row["status"], "completed");
        assert_eq!(row["reason"], "");
        assert!(row.contains_key("startedAt") && row.contains_key("endedAt"));

        set_worker_status(
            &mut doc,
            "claude",
            WorkerStatus::NotRun,
            "reset",
            &Map::new(),
        );
        let row = find_worker(&doc, "claude").unwrap();
        assert_eq!(row["reason"], "reset");
        assert!(!row.contains_key("startedAt") && !row.contains_key("endedAt"));
    }

    #[test]
    fn pristine_marking_touches_only_untouched_rows() {
        let mut doc = fresh_document();
        assert!(!mark_pristine_not_run(&mut doc, "ghost", "skipped"));
        assert!(find_worker(&doc, "ghost").is_none());

        ensure_worker(&mut doc, "a", &Map::new());
        assert!(mark_pristine_not_run(&mut doc, "a", "not in roster"));
        assert_eq!(find_worker(&doc, "a").unwrap()["reason"], "not in roster");
        // Already has a reason: left alone.
        assert!(!mark_pristine_not_run(&mut doc, "a", "other"));
        assert_eq!(find_worker(&doc, "a").unwrap()["reason"], "not in roster");

        ensure_worker(&mut doc, "b", &Map::new());
        set_worker_status(&mut doc, "b", WorkerStatus::Error, "boom", &Map::new());
        assert!(!mark_pristine_not_run(&mut doc, "b", "skipped"));
        assert_eq!(find_worker(&doc, "b").unwrap()["status"], "error");
    }

    #[test]
    fn worker_changes_compose_in_order() {
        let mut first = worker_status_change(WorkerStatus::InProgress, "", &Map::new(), "t1");
        first.then(worker_status_change(
            WorkerStatus::Timeout,
            "idle",
            &Map::new(),
            "t2",
        ));
        let mut composed = map(json!({"workerId": "w", "other": 1}));
        first.apply(&mut composed);

        let mut stepwise = map(json!({"workerId": "w", "other": 1}));
        worker_status_change(WorkerStatus::InProgress, "", &Map::new(), "t1").apply(&mut stepwise);
        worker_status_change(WorkerStatus::Timeout, "idle", &Map::new(), "t2").apply(&mut stepwise);
        assert_eq!(composed, stepwise);
        assert_eq!(composed["startedAt"], "t1");
        assert_eq!(composed["endedAt"], "t2");
    }

    #[test]
    fn status_names_round_trip() {
        for s in [
            WorkerStatus::NotRun,
            WorkerStatus::InProgress,
            WorkerStatus::Completed,
            WorkerStatus::Timeout,
            WorkerStatus::Error,
        ] {
            assert_eq!(s.as_str().parse::<WorkerStatus>().unwrap(), s);
        }
        assert!("done".parse::<WorkerStatus>().is_err());
    }
}
