//! What exec writes, and when (docs/exec.md#what-is-written-when).
//!
//! The events log is the write-ahead record: every [`Event`] goes to its
//! [`Journal`] first, and a dispatch is committed with `fdatasync` before the
//! attempt's command may start. Team-state is a projection of the events:
//! `rows` turns an event of a job into the rows it implies, the same way
//! whether the event happens now or is replayed by a later exec to fill rows
//! a dead executor never wrote ([`Recorder::reconcile`]). The rows go to a
//! [`Ledger`], written whole at bounded intervals.
//!
//! Writing a record is not bookkeeping that may fail quietly: a dispatch
//! that cannot be recorded is not launched, and a settlement that cannot be
//! recorded stops the run (the next exec settles it again from the
//! wrapper's status sidecar). Only the error log is best effort
//! (docs/exec.md#settling-an-attempt).

use super::event::{Dispatched, Event};
use super::replay::History;
use super::row::{DispatchRow, DispatchStatus};
use crate::beneath::Beneath;
use crate::plan::{Job, Plan};
use crate::state::attempts::{AttemptId, AttemptOutcome};
use crate::state::error_log::{self, ErrorRecord};
use crate::state::journal::{self, Journal, Opener, Stamp, Sync};
use crate::state::syncer::{RecordError, Syncer, Ticket, Wake};
use crate::state::team_state::{TeamStateStore, WorkerStatus};
use crate::state::{Ledger, StateError};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What follows a failed attempt: its row and the worker's differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Another attempt under docs/exec.md#retries: the worker stays in
    /// progress.
    Retry,
    /// The job ended (or a later exec resumes it): the worker row says so.
    End,
}

pub struct Recorder {
    events: Journal,
    /// Makes dispatch commits durable off the loop's thread, once
    /// [`Self::sync_off_thread`] started it.
    syncer: Option<Syncer>,
    /// How okstra's own files are opened: below the root, no symlink.
    opener: Opener,
    errors: PathBuf,
    /// The error log as exec last left it (`None`: there was none).
    errors_stamp: Option<Stamp>,
    ledger: Ledger,
    task_key: String,
    phase: String,
    /// The stage snapshots exec wrote, as it left them.
    snapshots: Vec<(PathBuf, Stamp)>,
    /// The snapshots directory, and what it held when exec started (earlier
    /// runs' baselines).
    snapshot_dir: (PathBuf, std::collections::HashSet<PathBuf>),
}

impl Recorder {
    /// Open the run's state. Team-state is not read here: [`super::run`]
    /// checked it before making the exec lock, so that one it cannot read
    /// refuses the run before anything is written
    /// (docs/exec.md#crash-safety-and-resume), and the resume reads its rows as
    /// a stream ([`Self::reconcile`]).
    pub fn open(root: &Path, plan: &Plan, own: Arc<Beneath>) -> Result<Recorder, StateError> {
        let abs = |p: &str| crate::paths::abs_of(root, p);
        let store = TeamStateStore::open(abs(&plan.run.team_state_path)).below(Arc::clone(&own));
        let events_path = abs(&plan.run.lead_events_path);
        let opener = Opener::Beneath(Arc::clone(&own));
        let events = Journal::open_with(&events_path, opener.clone())
            .map_err(|e| StateError::io(&events_path, e))?;
        let errors = abs(&plan.run.error_log_path);
        if errors.exists() {
            // Cut a torn record of a killed exec before the next append.
            Journal::open_with(&errors, opener.clone()).map_err(|e| StateError::io(&errors, e))?;
        }
        let snapshot_dir = store
            .path()
            .parent()
            .map(|d| d.join("snapshots"))
            .unwrap_or_default();
        let before = std::fs::read_dir(&snapshot_dir)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        let errors_stamp = Stamp::at(&errors).ok().flatten();
        Ok(Recorder {
            events,
            syncer: None,
            opener,
            errors,
            errors_stamp,
            ledger: Ledger::new(store, Duration::from_millis(250)).below(Arc::clone(&own)),
            task_key: plan.run.task_key.clone(),
            phase: plan.run.workflow_phase.clone(),
            snapshots: Vec::new(),
            snapshot_dir: (snapshot_dir, before),
        })
    }

    pub fn events_path(&self) -> &Path {
        self.events.path()
    }

    pub fn store(&self) -> &TeamStateStore {
        self.ledger.store()
    }

    /// Every event in the log (any plan), in order, read one at a time.
    pub fn read_events(&self) -> std::io::Result<journal::Lines<Event>> {
        journal::Lines::open(self.events.path())
    }

    /// Queue `event` of `job` for the next commit and project it onto
    /// team-state.
    pub fn record(&mut self, job: &Job, event: &Event, then: Then) {
        self.events.push(&event.line());
        rows(&mut self.ledger, job, event, then, None);
    }

    /// An event that changes no row (an egress refusal, a stage's
    /// snapshot): the events log alone.
    pub fn note(&mut self, event: &Event) {
        self.events.push(&event.line());
    }

    /// The dispatch row of an attempt that settled: the dispatch's facts
    /// and the settlement's.
    pub fn record_settled(
        &mut self,
        job: &Job,
        dispatched: &Dispatched,
        event: &Event,
        then: Then,
    ) {
        self.events.push(&event.line());
        rows(&mut self.ledger, job, event, then, Some(dispatched));
    }

    /// Write every queued event; with [`Sync::Data`], on disk before this
    /// returns.
    pub fn commit(&mut self, sync: Sync) -> std::io::Result<()> {
        self.events.commit(sync)
    }

    /// From now on, [`Self::commit_ahead`] syncs on a thread of its own,
    /// which calls `wake` after each sync. Where no thread can be started,
    /// commits stay synchronous.
    pub fn sync_off_thread(&mut self, wake: Wake) {
        if self.syncer.is_none() {
            self.syncer = Syncer::start(self.events.path().to_path_buf(), wake).ok();
        }
    }

    /// Append the queued records now and make them durable off this
    /// thread: what they announce may happen once [`Self::durable`] says
    /// the ticket is. An error: nothing of them is in the log.
    pub fn commit_ahead(&mut self) -> std::io::Result<Ticket> {
        let Some(syncer) = &mut self.syncer else {
            self.events.commit(Sync::Data)?;
            return Ok(Ticket::DURABLE);
        };
        Ok(match self.events.commit_for_sync()? {
            Some(file) => syncer.request(file),
            None => Ticket::DURABLE,
        })
    }

    /// Whether the commit of `ticket` is durable; why it never will be.
    pub fn durable(&self, ticket: Ticket) -> Result<bool, RecordError> {
        match &self.syncer {
            Some(syncer) => syncer.durable(ticket),
            None => Ok(true),
        }
    }

    /// A `workers[]` row for a job that ends this exec without running,
    /// where it has none or it is still pristine.
    pub fn not_run(&mut self, job: &Job, reason: &str) {
        if has_worker_row(job) {
            self.ledger.ensure_worker(&job.key, &worker_fields(job));
            self.ledger
                .patch_worker_if_pristine(&job.key, WorkerStatus::NotRun, reason);
        }
    }

    /// A job refused at its start (`exec/binding-changed`): `not-run` with
    /// the reason, whatever its row said.
    pub fn refused(&mut self, job: &Job, reason: &str) {
        if has_worker_row(job) {
            let fields = worker_fields(job);
            self.ledger.ensure_worker(&job.key, &fields);
            self.ledger
                .patch_worker(&job.key, WorkerStatus::NotRun, reason, &fields);
        }
    }

    /// A job that could not be started: `error` with the reason. Nothing
    /// of it ran, so the next exec starts it afresh.
    pub fn unstarted_error(&mut self, job: &Job, reason: &str) {
        if has_worker_row(job) {
            let fields = worker_fields(job);
            self.ledger.ensure_worker(&job.key, &fields);
            self.ledger
                .patch_worker(&job.key, WorkerStatus::Error, reason, &fields);
        }
    }

    /// Make team-state hold every row the events of this plan imply, for
    /// the jobs whose rows a dead executor never wrote
    /// (docs/exec.md#crash-safety-and-resume). A job whose rows already agree
    /// with its events is left alone, so what the lead wrote on it since
    /// stands.
    pub fn reconcile(
        &mut self,
        jobs: &super::jobs::Jobs,
        histories: &[History],
    ) -> Result<usize, StateError> {
        use crate::state::team_state::dispatch_row_key;
        // What team-state holds, read as a stream: the status of each
        // dispatch row and worker row, never the document as a tree.
        let path = self.ledger.store().path().to_path_buf();
        let index = match std::fs::File::open(&path) {
            Ok(f) => crate::state::merge::index(&path, std::io::BufReader::new(f))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(StateError::io(&path, e)),
        };
        let recorded = &index.dispatches;
        let worker_status = |key: &str| index.workers.get(key).cloned();
        let mut filled = 0;
        for (i, history) in histories.iter().enumerate() {
            // A job with no attempt has nothing to reconcile: not parsed.
            if history.attempts.is_empty() {
                continue;
            }
            let job = jobs.get(i);
            let job = &*job;
            let behind = history.attempts.iter().any(|a| {
                let Some(d) = &a.dispatched else { return false };
                let want = a
                    .settled
                    .as_ref()
                    .map_or(DispatchStatus::Running, |s| s.status.into())
                    .as_str();
                let row = DispatchRow::of(job, d, None).to_value();
                dispatch_row_key(&row)
                    .and_then(|k| recorded.get(&k))
                    .map(String::as_str)
                    != Some(want)
            }) || (has_worker_row(job)
                && !history.attempts.is_empty()
                && matches!(worker_status(&job.key).as_deref(), None | Some("not-run")));
            if !behind {
                continue;
            }
            filled += 1;
            for a in &history.attempts {
                let Some(d) = &a.dispatched else { continue };
                let dispatched = Event::WorkerDispatched(d.clone());
                rows(&mut self.ledger, job, &dispatched, Then::End, None);
                if let Some(s) = &a.settled {
                    let event = if a.completed {
                        Event::WorkerResultCollected(s.clone())
                    } else {
                        Event::WorkerFailed(s.clone())
                    };
                    let then = if a.retry_scheduled {
                        Then::Retry
                    } else {
                        Then::End
                    };
                    rows(&mut self.ledger, job, &event, then, Some(d));
                }
            }
        }
        Ok(filled)
    }

    /// Write team-state when it is due (its interval passed, or many rows
    /// are held), the events it reflects made durable first: team-state
    /// never runs ahead of the log it is a view of.
    pub fn maybe_flush(&mut self) -> Result<(), RecordError> {
        if !self.ledger.flush_due() {
            return Ok(());
        }
        self.commit(Sync::Data)
            .map_err(|e| RecordError::Events(Arc::new(e)))?;
        self.ledger
            .flush()
            .map_err(|e| RecordError::TeamState(Arc::new(e)))
    }

    pub fn flush(&mut self) -> Result<(), StateError> {
        self.ledger.flush()
    }

    pub fn flush_if_dirty(&mut self) -> Result<(), StateError> {
        self.ledger.flush_if_dirty()
    }

    /// Watch a stage snapshot of this run as exec leaves it (written now,
    /// or read back as its record vouches), for [`Self::own_file_changes`].
    pub fn keep_snapshot(&mut self, path: &Path) {
        if let Ok(Some(stamp)) = Stamp::at(path) {
            self.snapshots.retain(|(p, _)| p != path);
            self.snapshots.push((path.to_path_buf(), stamp));
        }
    }

    /// okstra's own files that someone else changed since exec last wrote
    /// them (docs/audit.md#the-mutation-audit), each with what happened. The
    /// changes are taken as the files' new baseline, so each is reported once.
    pub fn own_file_changes(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        match self.events.tampered() {
            Ok(Some(why)) => {
                out.push(why);
                let _ = self.events.adopt_current();
            }
            Ok(None) => {}
            Err(e) => out.push(format!("{}: {e}", self.events.path().display())),
        }
        if let Some(why) = self.ledger.changed_by_others() {
            out.push(why);
        }
        let now = Stamp::at(&self.errors).ok().flatten();
        if now != self.errors_stamp {
            out.push(format!(
                "{} was changed outside okstra",
                self.errors.display()
            ));
            self.errors_stamp = now;
        }
        for (path, stamp) in &mut self.snapshots {
            match Stamp::at(path) {
                Ok(Some(now)) if now == *stamp => {}
                Ok(now) => {
                    out.push(format!("{} was changed outside okstra", path.display()));
                    if let Some(now) = now {
                        *stamp = now;
                    }
                }
                Err(e) => out.push(format!("{}: {e}", path.display())),
            }
        }
        // A file in the snapshots directory that was not there when exec
        // started and that exec did not write.
        let (dir, before) = &mut self.snapshot_dir;
        if let Ok(entries) = std::fs::read_dir(&*dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                let ours = self.snapshots.iter().any(|(p, _)| *p == path);
                let temp = entry.file_name().to_string_lossy().starts_with('.');
                if !ours && !temp && !before.contains(&path) {
                    out.push(format!("{} appeared outside okstra", path.display()));
                    before.insert(path);
                }
            }
        }
        out
    }

    /// Append a failed attempt to the error log. Never fails the dispatch:
    /// how it went is returned for the event. `log` is the job's log and
    /// where this attempt's output starts in it, where the wrapper said.
    #[allow(clippy::too_many_arguments)]
    pub fn error_log(
        &mut self,
        job: &Job,
        attempt: u64,
        exit_code: i64,
        duration_ms: Option<i64>,
        message: &str,
        (log, offset): (&Path, Option<u64>),
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
            stderr_excerpt: error_log::log_excerpt(log, offset),
            identity,
        };
        let path = self.errors.display().to_string();
        let appended = error_log::fit_record(record.to_map())
            .map_err(|e| e.to_string())
            .and_then(|line| {
                crate::fault::point("error-log-append");
                let mut j = Journal::open_with(&self.errors, self.opener.clone())
                    .map_err(|e| e.to_string())?;
                j.push(&line);
                j.commit(Sync::None).map_err(|e| e.to_string())?;
                self.errors_stamp = Some(j.stamp());
                Ok(())
            });
        match appended {
            Ok(()) => json!({"ok": true, "path": path}),
            Err(reason) => json!({"ok": false, "path": path, "reason": reason}),
        }
    }
}

/// A translator has no workers[] row; its status lives on its dispatch row.
fn has_worker_row(job: &Job) -> bool {
    use crate::model::TRANSLATOR;
    !(job.role == crate::vocab::Role::Translator && job.key == TRANSLATOR)
}

fn worker_fields(job: &Job) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("provider".into(), json!(job.provider));
    m.insert("role".into(), json!(job.role));
    m.insert("promptPath".into(), json!(job.prompt_path));
    m.insert("resultPath".into(), json!(job.result_path));
    m.insert(
        "modelExecutionValue".into(),
        json!(job.model_execution_value),
    );
    m
}

fn attempt_id(job: &Job, head: &super::event::Head) -> AttemptId {
    AttemptId::new(
        head.dispatch_id.clone().unwrap_or_default(),
        job.key.clone(),
        head.attempt as u32,
    )
    .in_plan(head.plan_digest.clone())
}

/// The team-state rows one event of `job` implies
/// (docs/exec.md#what-is-written-when): its dispatch row, the worker's row and
/// the attempt record. `dispatched` is the attempt's dispatch, for a
/// settlement's row.
fn rows(
    ledger: &mut Ledger,
    job: &Job,
    event: &Event,
    then: Then,
    dispatched: Option<&Dispatched>,
) {
    let Some(head) = event.head() else {
        return;
    };
    match event {
        Event::WorkerDispatched(d) => {
            if has_worker_row(job) {
                let fields = worker_fields(job);
                ledger.ensure_worker(&job.key, &fields);
                ledger.patch_worker(&job.key, WorkerStatus::InProgress, "", &fields);
            }
            ledger.upsert_dispatch(DispatchRow::of(job, d, None).to_value());
            ledger.start_attempt(&attempt_id(job, head));
        }
        Event::WorkerResultCollected(s) | Event::WorkerFailed(s) => {
            if let Some(d) = dispatched {
                ledger.upsert_dispatch(DispatchRow::of(job, d, Some(s)).to_value());
            }
            let completed = matches!(event, Event::WorkerResultCollected(_));
            let status = s.status;
            let outcome = AttemptOutcome {
                status,
                result_path: completed.then(|| job.worker_result_path.clone()),
                change_summary: s.mutation_audit.clone(),
            };
            // A contradiction with an earlier settlement is refused by the
            // ledger and surfaces at its flush.
            let _ = ledger.finish_attempt(&attempt_id(job, head), outcome);
            if has_worker_row(job) && (completed || then == Then::End) {
                let fields = worker_fields(job);
                ledger.ensure_worker(&job.key, &fields);
                ledger.patch_worker(&job.key, status.into(), &s.reason, &fields);
            }
        }
        Event::WorkerRetryScheduled(_)
        | Event::EgressRefused(_)
        | Event::StageSnapshotWritten(_) => {}
    }
}
