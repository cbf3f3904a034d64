//! The executor's buffered view of team-state.
//!
//! Rewriting the whole team-state file for every event makes a run of N jobs
//! cost O(N²) bytes written. The ledger instead collects what this executor
//! means to record, folded per row (a dispatch by its id, a worker by its key,
//! an attempt by its identity), and writes it in one go on [`Ledger::flush`]:
//! under the lock it re-reads the file, merges the pending changes into it,
//! and replaces it. Rows and keys that other writers put there meanwhile are
//! kept; our dispatch rows replace theirs by id, our worker fields overwrite
//! theirs field by field.
//!
//! What has not been flushed is lost if the process dies, so callers flush at
//! the points that matter (an attempt settled, a stage ended, exit) and call
//! [`Ledger::maybe_flush`] in between.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::attempts::{check_same_outcome, AttemptId, AttemptOutcome, AttemptPatch};
use super::team_state::{
    worker_status_change, TeamStateStore, WorkerChange, WorkerPatch, WorkerStatus,
};
use super::StateError;
use crate::clock;

/// Rows keyed for folding, in first-touched order so flushes are
/// deterministic.
#[derive(Debug)]
struct Keyed<K, V> {
    rows: Vec<(K, V)>,
    slot: HashMap<K, usize>,
}

impl<K, V> Default for Keyed<K, V> {
    fn default() -> Self {
        Keyed {
            rows: Vec::new(),
            slot: HashMap::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V: Default> Keyed<K, V> {
    fn entry(&mut self, key: &K) -> &mut V {
        let index = match self.slot.get(key) {
            Some(&index) => index,
            None => {
                self.slot.insert(key.clone(), self.rows.len());
                self.rows.push((key.clone(), V::default()));
                self.rows.len() - 1
            }
        };
        &mut self.rows[index].1
    }

    fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

#[derive(Debug, Default)]
struct Pending {
    /// Dispatch rows in arrival order; a row with an id replaces our own
    /// earlier row with that id.
    dispatches: Vec<Value>,
    dispatch_slot: HashMap<String, usize>,
    workers: Keyed<String, WorkerPatch>,
    attempts: Keyed<AttemptId, AttemptPatch>,
    /// `not-run` reasons for rows nobody touched yet, applied after the
    /// worker patches.
    pristine: Vec<(String, String)>,
}

impl Pending {
    /// Rows held: what a flush has to merge.
    fn len(&self) -> usize {
        self.dispatches.len() + self.workers.rows.len() + self.attempts.rows.len()
    }

    fn is_empty(&self) -> bool {
        self.dispatches.is_empty()
            && self.workers.is_empty()
            && self.attempts.is_empty()
            && self.pristine.is_empty()
    }
}

/// [`Ledger::maybe_flush`] waits at least this many times the last flush's
/// duration between flushes (after the end of one, before the next).
const FLUSH_SPACING: u32 = 30;

/// Rows held past which a flush is due sooner (after [`CAP_SPACING`] times
/// the last flush's duration): what is held between flushes stays small
/// however fast jobs end, at a bounded share of the time.
const PENDING_CAP: usize = 1024;
const CAP_SPACING: u32 = 3;

/// Buffered, merge-on-flush writer of one team-state file.
#[derive(Debug)]
pub struct Ledger {
    store: TeamStateStore,
    flush_interval: Duration,
    last_flush: Instant,
    /// How long the last flush took. The file grows with the run, so a
    /// fixed interval would make a long run spend ever more of its time
    /// rewriting it (quadratic in the number of jobs); [`Self::maybe_flush`]
    /// spaces flushes out to keep that share bounded instead.
    last_flush_cost: Duration,
    pending: Pending,
    /// Outcomes this ledger has settled, to refuse a contradiction at once
    /// rather than at the next flush.
    settled: HashMap<AttemptId, AttemptOutcome>,
    /// The file's identity as this ledger last wrote it: while the file
    /// still has it, nobody else wrote it ([`Self::changed_by_others`]).
    written: Option<FileStamp>,
    /// Where the file is written from, when no symlink may be followed on
    /// the way (exec's own writes, docs/exec.md#never-through-a-symlink).
    below: Option<std::sync::Arc<crate::beneath::Beneath>>,
}

/// What tells one version of a file from another: a write through
/// `write_atomic` renames a new inode into place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn stamp_of(path: &std::path::Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        ino: m.ino(),
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    })
}

impl Ledger {
    /// A ledger over `store` whose [`Self::maybe_flush`] writes at most once
    /// per `flush_interval`, and less often when flushes get slow.
    pub fn new(store: TeamStateStore, flush_interval: Duration) -> Self {
        Ledger {
            store,
            flush_interval,
            last_flush: Instant::now(),
            last_flush_cost: Duration::ZERO,
            pending: Pending::default(),
            settled: HashMap::new(),
            written: None,
            below: None,
        }
    }

    /// Write the file below `root`, never through a symlink.
    pub fn below(mut self, root: std::sync::Arc<crate::beneath::Beneath>) -> Ledger {
        self.below = Some(root);
        self
    }

    pub fn store(&self) -> &TeamStateStore {
        &self.store
    }

    /// Whether there is anything not yet written.
    pub fn is_dirty(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Record a dispatch row (same rule as
    /// [`super::team_state::upsert_dispatch`]).
    pub fn upsert_dispatch(&mut self, row: Value) {
        let pending = &mut self.pending;
        let id = super::team_state::dispatch_row_key(&row);
        match id.as_ref().and_then(|id| pending.dispatch_slot.get(id)) {
            Some(&index) => pending.dispatches[index] = row,
            None => {
                if let Some(id) = id {
                    pending.dispatch_slot.insert(id, pending.dispatches.len());
                }
                pending.dispatches.push(row);
            }
        }
    }

    /// Make sure worker `key` has a `workers[]` row (created `not-run` with
    /// `fields` if missing).
    pub fn ensure_worker(&mut self, key: &str, fields: &Map<String, Value>) {
        self.pending
            .workers
            .entry(&key.to_string())
            .then(WorkerPatch {
                ensure: Some(fields.clone()),
                change: WorkerChange::default(),
            });
    }

    /// Move worker `key` to `status` now, with `reason` and `extra` fields
    /// (same rule as [`super::team_state::set_worker_status`]).
    pub fn patch_worker(
        &mut self,
        key: &str,
        status: WorkerStatus,
        reason: &str,
        extra: &Map<String, Value>,
    ) {
        let change = worker_status_change(status, reason, extra, &clock::now());
        self.pending
            .workers
            .entry(&key.to_string())
            .then(WorkerPatch {
                ensure: None,
                change,
            });
    }

    /// Give worker `key` the `not-run` reason `reason` if its row is still
    /// pristine (`not-run`, no reason) when the pending changes are written.
    pub fn patch_worker_if_pristine(&mut self, key: &str, status: WorkerStatus, reason: &str) {
        debug_assert_eq!(status, WorkerStatus::NotRun);
        self.pending
            .pristine
            .push((key.to_string(), reason.to_string()));
    }

    /// Whether someone else replaced the file since this ledger last wrote
    /// it: what, for the audit of okstra's own files
    /// (docs/audit.md#okstras-own-files). `None` before the first write.
    pub fn changed_by_others(&self) -> Option<String> {
        let stamp = self.written.as_ref()?;
        (stamp_of(self.store.path()) != Some(*stamp))
            .then(|| format!("{} was changed outside okstra", self.store.path().display()))
    }

    /// Record that attempt `id` started now (kept if already recorded).
    pub fn start_attempt(&mut self, id: &AttemptId) {
        let patch = self.pending.attempts.entry(id);
        if patch.started_at.is_none() {
            patch.started_at = Some(clock::now());
        }
    }

    /// Settle attempt `id` now. `Ok(false)` if this ledger already settled it
    /// the same way; [`StateError::AttemptDrift`] if differently. A drift with
    /// a settlement only the file knows surfaces from [`Self::flush`].
    pub fn finish_attempt(
        &mut self,
        id: &AttemptId,
        outcome: AttemptOutcome,
    ) -> Result<bool, StateError> {
        if let Some(previous) = self.settled.get(id) {
            return check_same_outcome(id, previous, &outcome).map(|()| false);
        }
        self.settled.insert(id.clone(), outcome.clone());
        self.pending.attempts.entry(id).finish = Some((outcome, clock::now()));
        Ok(true)
    }

    /// Write everything pending now, merged into the file's current content
    /// under the team-state lock. Writes even when nothing is pending.
    ///
    /// On an I/O or parse error nothing is written and everything stays
    /// pending. An attempt drift against the file is reported after the rest
    /// was written; the file keeps its recorded outcome.
    pub fn flush(&mut self) -> Result<(), StateError> {
        let started = Instant::now();
        let _lock = self.store.lock()?;
        let path = self.store.path().to_path_buf();
        let mut old: Box<dyn std::io::BufRead> = match std::fs::File::open(&path) {
            Ok(file) => Box::new(std::io::BufReader::with_capacity(64 * 1024, file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Box::new(std::io::empty()),
            Err(e) => return Err(StateError::io(&path, e)),
        };
        let pending = &self.pending;
        let changes = super::merge::Changes {
            workers: pending
                .workers
                .rows
                .iter()
                .map(|(k, p)| (k.as_str(), p))
                .collect(),
            pristine: &pending.pristine,
            dispatches: &pending.dispatches,
            attempts: pending.attempts.rows.iter().map(|(k, p)| (k, p)).collect(),
        };
        // The old file streamed through the merge into the new one: one
        // row in memory at a time. A document that is not team-state fails
        // the merge, and nothing is renamed.
        let durability = crate::fsutil::Durability::Fsync;
        let mut failure = None;
        let mut drift = Ok(());
        let mut write = |out: &mut dyn std::io::Write| -> std::io::Result<()> {
            match super::merge::merge(&path, &mut old, &changes, out) {
                Ok(d) => {
                    drift = d;
                    Ok(())
                }
                Err(e) => {
                    failure = Some(e);
                    Err(std::io::Error::other("team-state merge"))
                }
            }
        };
        let written = match &self.below {
            Some(root) => root
                .relative(&path)
                .and_then(|rel| root.write_atomic_with(rel, durability, &mut write))
                .map_err(std::io::Error::from),
            None => crate::fsutil::write_atomic_with(&path, durability, &mut write),
        };
        if let Some(e) = failure {
            return Err(e);
        }
        written.map_err(|e| StateError::io(&path, e))?;

        self.written = stamp_of(&path);
        self.pending = Pending::default();
        self.last_flush = Instant::now();
        self.last_flush_cost = self.last_flush - started;
        drift
    }

    /// [`Self::flush`], unless this ledger flushed before and nothing is
    /// pending since: a large team-state is not rewritten for nothing.
    pub fn flush_if_dirty(&mut self) -> Result<(), StateError> {
        if self.is_dirty() || self.written.is_none() {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// Flush if something is pending and the interval since the last flush
    /// has passed: `flush_interval`, or `FLUSH_SPACING` times what the last
    /// flush took when that is longer, so that at most about a thirtieth of the
    /// time goes to rewriting the file however large it grew. Returns whether
    /// it flushed.
    pub fn maybe_flush(&mut self) -> Result<bool, StateError> {
        if !self.flush_due() {
            return Ok(false);
        }
        self.flush().map(|()| true)
    }

    /// Whether [`Self::maybe_flush`] would write now: something is pending
    /// and the interval passed, or `PENDING_CAP` rows are held.
    pub fn flush_due(&self) -> bool {
        if !self.is_dirty() {
            return false;
        }
        let since = self.last_flush.elapsed();
        let interval = self
            .flush_interval
            .max(self.last_flush_cost.saturating_mul(FLUSH_SPACING));
        since >= interval
            || (self.pending.len() >= PENDING_CAP
                && since >= self.last_flush_cost.saturating_mul(CAP_SPACING))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::attempts::{find_attempt, AttemptStatus};
    use crate::state::team_state::{
        find_dispatch, find_worker, rows, upsert_dispatch, WORKERS, WORKER_DISPATCHES,
    };
    use serde_json::json;

    fn ledger(dir: &tempfile::TempDir, interval: Duration) -> Ledger {
        Ledger::new(
            TeamStateStore::open(dir.path().join("run/team-state.json")),
            interval,
        )
    }

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn another_writers_update_between_flushes_survives() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger(&dir, Duration::ZERO);
        ledger.ensure_worker("codex", &fields(json!({"role": "implementer"})));
        ledger.upsert_dispatch(json!({"dispatchId": "i1:attempt-1", "status": "in-progress"}));
        ledger.flush().unwrap();

        // The lead writes meanwhile: its own worker, a note on ours, a dispatch
        // row of its own, and a top-level key okstra knows nothing about.
        ledger
            .store()
            .mutate(|doc| {
                doc["leadNote"] = json!("hello");
                upsert_dispatch(doc, json!({"dispatchId": "lead:1"}));
                crate::state::team_state::ensure_worker(doc, "lead", &Map::new());
                let rows = crate::state::team_state::rows_mut(doc, WORKERS);
                rows[0]["note"] = json!("from lead");
            })
            .unwrap();

        ledger.upsert_dispatch(json!({"dispatchId": "i1:attempt-1", "status": "completed"}));
        ledger.patch_worker("codex", WorkerStatus::Completed, "", &Map::new());
        ledger.flush().unwrap();

        let doc = ledger.store().read().unwrap();
        assert_eq!(doc["leadNote"], "hello");
        assert!(find_dispatch(&doc, "lead:1").is_some());
        assert_eq!(
            find_dispatch(&doc, "i1:attempt-1").unwrap()["status"],
            "completed"
        );
        assert_eq!(rows(&doc, WORKER_DISPATCHES).len(), 2);
        let codex = find_worker(&doc, "codex").unwrap();
        assert_eq!(codex["status"], "completed");
        assert_eq!(codex["note"], "from lead");
        assert_eq!(codex["role"], "implementer");
        assert!(find_worker(&doc, "lead").is_some());
    }

    #[test]
    fn ensure_does_not_reset_a_row_another_writer_advanced() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger(&dir, Duration::ZERO);
        ledger
            .store()
            .mutate(|doc| {
                crate::state::team_state::set_worker_status(
                    doc,
                    "gemini",
                    WorkerStatus::Error,
                    "earlier run",
                    &Map::new(),
                )
            })
            .unwrap();
        ledger.ensure_worker("gemini", &Map::new());
        ledger.flush().unwrap();
        let doc = ledger.store().read().unwrap();
        assert_eq!(find_worker(&doc, "gemini").unwrap()["status"], "error");
    }

    #[test]
    fn pending_changes_fold_per_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger(&dir, Duration::ZERO);
        for n in 0..3 {
            ledger.upsert_dispatch(json!({"dispatchId": "d:attempt-1", "n": n}));
        }
        ledger.upsert_dispatch(json!({"workerId": "x"}));
        ledger.upsert_dispatch(json!({"workerId": "x"}));
        ledger.patch_worker("w", WorkerStatus::InProgress, "", &Map::new());
        ledger.patch_worker("w", WorkerStatus::Timeout, "idle", &Map::new());
        ledger.flush().unwrap();
        assert!(!ledger.is_dirty());

        let doc = ledger.store().read().unwrap();
        let dispatches = rows(&doc, WORKER_DISPATCHES);
        assert_eq!(dispatches.len(), 3);
        assert_eq!(dispatches[0]["n"], 2);
        let w = find_worker(&doc, "w").unwrap();
        assert_eq!(w["status"], "timeout");
        assert_eq!(w["reason"], "idle");
        assert!(w.contains_key("startedAt") && w.contains_key("endedAt"));
    }

    #[test]
    fn maybe_flush_waits_for_dirt_and_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let mut slow = ledger(&dir, Duration::from_secs(3600));
        slow.upsert_dispatch(json!({"dispatchId": "a"}));
        assert!(!slow.maybe_flush().unwrap());
        assert!(slow.is_dirty());
        assert!(!slow.store().path().exists());

        let mut eager = ledger(&dir, Duration::ZERO);
        assert!(!eager.maybe_flush().unwrap(), "nothing pending");
        eager.upsert_dispatch(json!({"dispatchId": "b"}));
        assert!(eager.maybe_flush().unwrap());
        assert!(!eager.is_dirty());
        // flush always writes, even with nothing pending.
        let store = eager.store().clone();
        std::fs::remove_file(store.path()).unwrap();
        eager.flush().unwrap();
        assert!(store.path().exists());
    }

    #[test]
    fn flush_if_dirty_writes_once_then_only_news() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger(&dir, Duration::ZERO);
        let path = ledger.store().path().to_path_buf();
        // Never flushed: written even with nothing pending.
        ledger.flush_if_dirty().unwrap();
        assert!(path.exists());
        let stamp = stamp_of(&path);
        ledger.flush_if_dirty().unwrap();
        assert_eq!(stamp_of(&path), stamp, "clean: not rewritten");
        ledger.upsert_dispatch(json!({"dispatchId": "d"}));
        ledger.flush_if_dirty().unwrap();
        assert_ne!(stamp_of(&path), stamp);
        assert!(find_dispatch(&ledger.store().read().unwrap(), "d").is_some());
    }

    #[test]
    fn attempts_settle_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger(&dir, Duration::ZERO);
        let id = AttemptId::new("i:attempt-1", "codex", 1);
        let outcome = AttemptOutcome {
            status: AttemptStatus::Completed,
            result_path: Some("out.json".into()),
            change_summary: None,
        };
        ledger.start_attempt(&id);
        assert!(ledger.finish_attempt(&id, outcome.clone()).unwrap());
        ledger.flush().unwrap();
        assert!(!ledger.finish_attempt(&id, outcome.clone()).unwrap());
        let failed = AttemptOutcome {
            status: AttemptStatus::Error,
            ..outcome.clone()
        };
        let err = ledger.finish_attempt(&id, failed.clone()).unwrap_err();
        assert!(matches!(err, StateError::AttemptDrift { .. }), "{err}");

        // A fresh ledger (a resumed executor) only learns of the drift from
        // the file; the recorded outcome stands and the rest is written.
        let mut resumed = Ledger::new(ledger.store().clone(), Duration::ZERO);
        resumed.finish_attempt(&id, failed).unwrap();
        resumed.upsert_dispatch(json!({"dispatchId": "other"}));
        assert!(matches!(
            resumed.flush(),
            Err(StateError::AttemptDrift { .. })
        ));
        let doc = resumed.store().read().unwrap();
        assert_eq!(find_attempt(&doc, &id).unwrap()["status"], "completed");
        assert!(find_dispatch(&doc, "other").is_some());
        assert!(!resumed.is_dirty());
    }

    #[test]
    fn a_large_run_flushes_in_one_merge() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger(&dir, Duration::ZERO);
        for i in 0..5000 {
            let key = format!("w{i}");
            ledger.ensure_worker(&key, &Map::new());
            ledger.upsert_dispatch(json!({"dispatchId": format!("{key}:attempt-1")}));
            ledger.patch_worker(&key, WorkerStatus::InProgress, "", &Map::new());
            ledger.patch_worker(&key, WorkerStatus::Completed, "", &Map::new());
        }
        ledger.flush().unwrap();
        for i in 0..5000 {
            ledger.upsert_dispatch(json!({"dispatchId": format!("w{i}:attempt-1"), "done": true}));
        }
        ledger.flush().unwrap();
        let doc = ledger.store().read().unwrap();
        assert_eq!(rows(&doc, WORKERS).len(), 5000);
        assert_eq!(rows(&doc, WORKER_DISPATCHES).len(), 5000);
        assert!(rows(&doc, WORKER_DISPATCHES)
            .iter()
            .all(|r| r["done"] == true));
    }
}
