//! `okstra exec`: verify a frozen plan, then run its stages crash-safely.

pub mod backend;
pub mod notices;
pub mod preflight;
pub mod progress;
pub mod record;
pub mod resume;
pub mod settle;

use crate::audit;
use crate::compile::paths;
use crate::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use crate::fsutil::FileLock;
use crate::plan::{Job, Plan};
use crate::process;
use crate::state::team_state::WorkerStatus;
use progress::Progress;
use record::Recorder;
use resume::JobState;
use serde_json::{json, Map, Value};
use settle::{Outcome, Settlement, Status};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Options {
    pub concurrency: Option<usize>,
    pub format: Format,
    /// The okstra binary that plays `okstra worker`.
    pub okstra: PathBuf,
    /// How long a stopped worker's group gets between SIGTERM and SIGKILL.
    pub grace: Duration,
}

/// What became of one job, for the summary.
#[derive(Debug, Clone)]
pub struct JobReport {
    pub stage: String,
    pub key: String,
    pub label: String,
    pub status: String,
    pub attempts: u64,
    pub reason: String,
    pub duration: Duration,
}

pub struct Outcomes {
    pub reports: Vec<JobReport>,
    pub interrupted: bool,
    /// Jobs refused at their start because their model binding moved
    /// (`exec/binding-changed`); they were not run.
    pub refused: Vec<Diagnostic>,
}

/// Verify, lock, run. Refusals return diagnostics and start nothing.
pub fn exec(plan_path: &Path, opts: &Options) -> Result<Outcomes, Diagnostics> {
    let (doc, plan) = crate::cli::read_plan(plan_path).map_err(Diagnostics::from)?;
    let root = PathBuf::from(&plan.project_root);
    preflight::verify(&doc, &plan, &root)?;
    let team_state = paths::abs_of(&root, &plan.run.team_state_path);
    if let Some(dir) = team_state.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let lock_path = crate::state::TeamStateStore::open(team_state.clone()).exec_lock_path();
    let lock = match FileLock::try_acquire(&lock_path) {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            return Err(Diagnostic::new(
                Code::ExecLocked,
                format!("another `okstra exec` holds this run ({})", lock_path.display()),
            )
            .help("wait for it to finish, or check `okstra status --manifest M`; a dead executor releases the lock by itself")
            .into())
        }
        Err(e) => {
            return Err(Diagnostic::new(Code::ExecState, format!("cannot lock {}: {e}", lock_path.display()))
                .help("okstra needs write access to the team-state directory")
                .into())
        }
    };
    let interrupt = process::interrupt_flag().map_err(|e| {
        Diagnostics::from(Diagnostic::new(
            Code::ExecState,
            format!("cannot install signal handlers: {e}"),
        ))
    })?;
    let mut runner = Runner::new(&root, &plan, opts, interrupt);
    let outcomes = runner.run();
    drop(lock);
    Ok(outcomes)
}

struct Running {
    job_index: usize,
    attempt: u64,
    pid: u32,
    started: Instant,
    watch: process::LogWatch,
    session_id: Option<String>,
}

/// An attempt that ended and waits to be settled.
struct Ended {
    job_index: usize,
    attempt: u64,
    outcome: Outcome,
    session_id: Option<String>,
    started: Instant,
}

/// Each job's binding verdict as of a manifest modification time and
/// length (`None` verdicts: the manifest could not be read).
type BindingVerdicts = (
    Option<std::time::SystemTime>,
    u64,
    Option<Vec<Option<String>>>,
);

struct Runner<'a> {
    root: PathBuf,
    /// What every audit snapshot and compare of the run walks, and skips.
    audit_roots: Vec<PathBuf>,
    audit_exclude: Vec<PathBuf>,
    plan: &'a Plan,
    opts: &'a Options,
    rec: Recorder,
    interrupt: Arc<AtomicBool>,
    jobs: Vec<(usize, &'a Job)>,
    reports: HashMap<usize, JobReport>,
    progress: Progress,
    /// The manifest as last read for the binding gate, keyed by its
    /// modification time and length, so it is parsed again only if it moved.
    /// Each job's binding verdict (None: the manifest is unreadable).
    manifest_cache: Option<BindingVerdicts>,
    refused: Vec<Diagnostic>,
    /// The multiplexer `pane` jobs run in, detected once per exec; `None`
    /// degrades them to `cli-wrapper`.
    pane: Option<backend::Pane>,
}

impl<'a> Runner<'a> {
    fn new(root: &Path, plan: &'a Plan, opts: &'a Options, interrupt: Arc<AtomicBool>) -> Self {
        let jobs = plan
            .stages
            .iter()
            .enumerate()
            .flat_map(|(si, s)| s.jobs.iter().map(move |j| (si, j)))
            .collect();
        let rec = Recorder::new(root, plan);
        let (audit_roots, audit_exclude) = Self::audit_walk(root, plan, &rec);
        Runner {
            root: root.to_path_buf(),
            audit_roots,
            audit_exclude,
            plan,
            opts,
            rec,
            interrupt,
            jobs,
            reports: HashMap::new(),
            progress: Progress::new(opts.format),
            manifest_cache: None,
            refused: Vec::new(),
            pane: None,
        }
    }

    /// How a job is really dispatched: its backend, or `cli-wrapper` with
    /// `degradedFrom` when it asked for a pane and no multiplexer answered.
    fn dispatch_mode(&self, job: &Job) -> Map<String, Value> {
        let mut m = Map::new();
        if job.backend == crate::model::PANE && self.pane.is_none() {
            m.insert("dispatchMode".into(), json!(crate::model::CLI_WRAPPER));
            m.insert("degradedFrom".into(), json!(crate::model::PANE));
        } else {
            m.insert("dispatchMode".into(), json!(job.backend));
        }
        m
    }

    fn event(&mut self, kind: &str, job: &Job, attempt: u64, mut facts: Map<String, Value>) {
        facts.extend(self.dispatch_mode(job));
        self.rec.event(kind, job, attempt, facts);
    }

    fn abs(&self, p: &str) -> PathBuf {
        paths::abs_of(&self.root, p)
    }

    fn run(&mut self) -> Outcomes {
        // Once per exec, never mid-run.
        if self
            .jobs
            .iter()
            .any(|(_, j)| j.backend == crate::model::PANE)
        {
            self.pane = backend::detect();
            match &self.pane {
                Some(p) => self
                    .progress
                    .line(format!("pane jobs run in {} windows", p.name())),
                None => self.progress.line(
                    "no terminal multiplexer answered: pane jobs run as cli-wrapper (degradedFrom: pane)"
                        .into(),
                ),
            }
        }
        let states = resume::job_states(&self.rec, self.plan, &self.root);
        let mut interrupted = false;
        let mut failed = false;
        for (si, stage) in self.plan.stages.iter().enumerate() {
            let indices: Vec<usize> = self
                .jobs
                .iter()
                .enumerate()
                .filter(|(_, (s, _))| *s == si)
                .map(|(i, _)| i)
                .collect();
            interrupted |= self.interrupt.load(Ordering::Relaxed);
            if failed || interrupted {
                let reason = if interrupted {
                    "interrupted before its stage started"
                } else {
                    "an earlier stage did not complete"
                };
                for &i in &indices {
                    self.report(i, "not-run", 0, reason, Duration::ZERO);
                }
                continue;
            }
            self.progress
                .stage(si, self.plan.stages.len(), &stage.name, indices.len());
            let (ok, stopped) = self.run_stage(si, &indices, &states);
            self.rec.flush();
            failed |= !ok;
            interrupted |= stopped;
        }
        // The last stage's end flushed already; write only what came since.
        self.rec.flush_if_dirty();
        for p in &self.rec.problems {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "okstra: warning: {p}");
        }
        // Plan order: stage by stage, jobs as the plan lists them.
        let reports: Vec<JobReport> = (0..self.jobs.len())
            .filter_map(|i| self.reports.remove(&i))
            .collect();
        Outcomes {
            reports,
            interrupted,
            refused: std::mem::take(&mut self.refused),
        }
    }

    /// SPEC §5.1 again, at the moment a v2 job starts: its role execution,
    /// participant, label and model binding must still be the manifest's.
    /// Returns why not. The manifest is re-read, and every job's verdict
    /// recomputed in one pass, only when its modification time or length
    /// changed, so a run of thousands of jobs does not re-index it per job.
    fn binding_gate(&mut self, i: usize) -> Option<String> {
        self.jobs[i].1.identity.v2()?;
        let path = self.abs(&self.plan.run.manifest_path);
        let meta = std::fs::metadata(&path).ok();
        let stamp = (
            meta.as_ref().and_then(|m| m.modified().ok()),
            meta.as_ref().map(|m| m.len()).unwrap_or(0),
        );
        let fresh = self
            .manifest_cache
            .as_ref()
            .is_some_and(|(t, l, _)| (*t, *l) == stamp && t.is_some());
        if !fresh {
            let verdicts = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .map(|doc| {
                    let manifest = crate::model::Manifest::new(&doc);
                    self.jobs
                        .iter()
                        .map(|(_, job)| preflight::binding_change(&manifest, job))
                        .collect()
                });
            self.manifest_cache = Some((stamp.0, stamp.1, verdicts));
        }
        match self
            .manifest_cache
            .as_ref()
            .and_then(|(_, _, v)| v.as_ref())
        {
            None => Some(format!(
                "the manifest {} can no longer be read",
                self.plan.run.manifest_path
            )),
            Some(verdicts) => verdicts[i].clone(),
        }
    }

    /// Refuse a job whose binding moved: it is not run, its row says why,
    /// and the refusal is reported as `exec/binding-changed`. The rest of its
    /// stage runs (each job passes its own gate); later stages do not start,
    /// because this stage did not complete.
    fn refuse(&mut self, i: usize, attempt: u64, why: String) {
        let job = self.jobs[i].1;
        let reason = format!("exec/binding-changed: {why}");
        self.progress
            .line(format!("{} refused at start: {why}", job.label()));
        self.rec.worker(job, WorkerStatus::NotRun, &reason);
        self.report(
            i,
            "not-run",
            attempt.saturating_sub(job.first_attempt()),
            &reason,
            Duration::ZERO,
        );
        self.refused.push(
            Diagnostic::new(Code::ExecBindingChanged, format!("{}: {why}", job.label()))
                .worker(job.label().to_string())
                .in_file(self.plan.run.manifest_path.clone())
                .help("the model binding changed after planning; the job was not run. Re-plan to run it with the new binding"),
        );
    }

    fn report(&mut self, i: usize, status: &str, attempts: u64, reason: &str, duration: Duration) {
        let (si, job) = self.jobs[i];
        self.reports.insert(
            i,
            JobReport {
                stage: self.plan.stages[si].name.clone(),
                key: job.key.clone(),
                label: job.label().to_string(),
                status: status.to_string(),
                attempts,
                reason: reason.to_string(),
                duration,
            },
        );
    }

    /// Run one stage through all its retry rounds. Returns (every job
    /// completed, interrupted).
    fn run_stage(
        &mut self,
        si: usize,
        indices: &[usize],
        states: &HashMap<usize, JobState>,
    ) -> (bool, bool) {
        let mut pending: Vec<(usize, u64)> = Vec::new();
        let mut adopted: Vec<Ended> = Vec::new();
        let mut all_ok = true;
        for &i in indices {
            let job = self.jobs[i].1;
            match states.get(&i).cloned().unwrap_or(JobState::Fresh) {
                JobState::Fresh => pending.push((i, job.first_attempt())),
                JobState::Completed { attempt } => {
                    self.progress.line(format!(
                        "{} already completed (attempt {attempt}); not run again",
                        job.label()
                    ));
                    self.report(
                        i,
                        "completed",
                        attempt,
                        "completed by an earlier exec",
                        Duration::ZERO,
                    );
                }
                JobState::Failed { attempt, reason } => {
                    self.report(i, "error", attempt, &reason, Duration::ZERO);
                    all_ok = false;
                }
                JobState::Retry { attempt } => pending.push((i, attempt)),
                JobState::Orphan {
                    attempt,
                    session_id,
                    pid,
                } => {
                    let outcome = resume::adopt(job, &self.root, &self.interrupt, pid);
                    adopted.push(Ended {
                        job_index: i,
                        attempt,
                        outcome,
                        session_id,
                        started: Instant::now(),
                    });
                }
            }
        }
        if !all_ok {
            return (false, false);
        }
        let snapshot = self.stage_snapshot(si, indices);
        if !adopted.is_empty() {
            let retries = self.settle_round(adopted, snapshot.as_ref(), indices);
            pending.extend(retries);
        }
        // An interrupt that lands while an orphan was being waited for, or
        // between rounds, stops the stage before anything new starts.
        let mut interrupted = self.interrupt.load(Ordering::Relaxed);
        if interrupted {
            for (i, _) in pending.drain(..) {
                self.report(
                    i,
                    "not-run",
                    0,
                    "interrupted before it started",
                    Duration::ZERO,
                );
            }
        }
        while !pending.is_empty() {
            let (ended, mut retries, stopped) = self.run_round(&pending, snapshot.is_none());
            interrupted |= stopped;
            retries.extend(self.settle_round(ended, snapshot.as_ref(), indices));
            pending = retries;
            if stopped || self.interrupt.load(Ordering::Relaxed) {
                interrupted = true;
                for (i, _) in pending.drain(..) {
                    self.report(
                        i,
                        "not-run",
                        0,
                        "interrupted before its retry started",
                        Duration::ZERO,
                    );
                }
            }
        }
        let ok = indices
            .iter()
            .all(|i| self.reports.get(i).is_some_and(|r| r.status == "completed"));
        (ok && !interrupted, interrupted)
    }

    /// Where stage snapshots are kept: `snapshots/` beside team-state.
    fn snapshot_dir(&self) -> PathBuf {
        self.abs(&self.plan.run.team_state_path)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
            .join("snapshots")
    }

    fn snapshot_path(&self, si: usize) -> PathBuf {
        let short = self.plan.digest.trim_start_matches("sha256:");
        self.snapshot_dir().join(format!(
            "{}-stage-{}.json",
            &short[..short.len().min(16)],
            si + 1
        ))
    }

    /// What the audit walks and leaves out, the same for every snapshot
    /// and compare of the run: the project root and every worktree outside
    /// it (of the whole plan, not only this stage: a later stage must not
    /// write an earlier implementer's worktree unseen), minus the
    /// orchestrator's own files.
    fn audit_walk(root: &Path, plan: &Plan, rec: &Recorder) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let abs = |p: &str| paths::abs_of(root, p);
        let mut roots = vec![root.to_path_buf()];
        for job in plan.jobs() {
            if let Some(w) = &job.worktree_path {
                let w = abs(w);
                if !w.starts_with(root) && !roots.contains(&w) {
                    roots.push(w);
                }
            }
        }
        let store = rec.ledger.store();
        let team = store.path().to_path_buf();
        let events = abs(&plan.run.lead_events_path);
        let mut exclude = vec![
            abs(&plan.run.manifest_path),
            store.lock_path(),
            store.exec_lock_path(),
            events.clone(),
            abs(&plan.run.error_log_path),
            team.parent()
                .map(Path::to_path_buf)
                .unwrap_or_default()
                .join("snapshots"),
            team,
        ];
        if let (Some(dir), Some(name)) = (events.parent(), events.file_name()) {
            exclude.push(dir.join(format!(".{}.lock", name.to_string_lossy())));
        }
        (roots, exclude)
    }

    fn audit_options(&self) -> audit::SnapshotOptions<'_> {
        audit::SnapshotOptions {
            roots: &self.audit_roots,
            project_root: &self.root,
            exclude: &self.audit_exclude,
        }
    }

    /// The stage's baseline, taken before its first round, or read back when
    /// a resumed exec already took it.
    fn stage_snapshot(&mut self, si: usize, indices: &[usize]) -> Option<audit::Snapshot> {
        if !indices
            .iter()
            .any(|&i| self.jobs[i].1.write_enforcement.mutation_audit == "batch")
        {
            return None;
        }
        let path = self.snapshot_path(si);
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(s) = serde_json::from_str::<audit::Snapshot>(&text) {
                return Some(s);
            }
        }
        let taken = audit::snapshot(&self.audit_options());
        match taken {
            Ok(s) => {
                if let Ok(text) = serde_json::to_vec(&s) {
                    if let Some(dir) = path.parent() {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    if let Err(e) =
                        crate::fsutil::write_atomic(&path, &text, crate::fsutil::Durability::Fsync)
                    {
                        self.rec.problems.push(format!(
                            "cannot store the audit snapshot {}: {e}",
                            path.display()
                        ));
                    }
                }
                Some(s)
            }
            Err(e) => {
                self.rec.problems.push(format!(
                    "cannot snapshot the project for the mutation audit: {e}"
                ));
                None
            }
        }
    }

    fn worker_argv(&self, job: &Job, attempt: u64, session_id: Option<&str>) -> Vec<String> {
        let mut argv: Vec<String> = job.command.clone();
        if argv.first().map(String::as_str) == Some("okstra") {
            argv[0] = self.opts.okstra.display().to_string();
        }
        let split = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
        let mut extra = vec!["--attempt".to_string(), attempt.to_string()];
        if let Some(id) = job.dispatch_id_for(attempt) {
            extra.extend(["--dispatch-id".into(), id]);
        }
        if let Some(s) = session_id {
            extra.extend(["--session-id".into(), s.to_string()]);
        }
        argv.splice(split..split, extra);
        argv
    }

    fn dispatch_row(
        &self,
        job: &Job,
        attempt: u64,
        status: &str,
        reason: &str,
        session_id: Option<&str>,
        extra: Map<String, Value>,
    ) -> Value {
        let mut row = self.rec.identity(job, attempt);
        let fields = json!({
            "role": job.role,
            "kind": job.dispatch_kind,
            "round": job.round,
            "provider": job.provider,
            "backend": job.backend,
            "livenessMode": job.liveness_mode,
            "status": status,
            "reason": reason,
            "sessionId": session_id.unwrap_or(""),
            "promptPath": job.prompt_path,
            "resultPath": job.result_path,
            "workerResultPath": job.worker_result_path,
            "completionPaths": job.completion_paths,
            "worktreePath": job.worktree_path,
            "modelExecutionValue": job.model_execution_value,
            "writePolicyDigest": job.write_policy.digest,
            "writeEnforcement": job.write_enforcement,
        });
        if let Value::Object(f) = fields {
            row.extend(f);
        }
        if let Some(inv) = &job.invocation {
            row.insert("invocationId".into(), json!(inv.invocation_id));
            row.insert("audience".into(), json!(inv.audience));
            row.insert("assignmentRef".into(), json!(inv.assignment_ref));
            row.insert("promptMetadataPath".into(), json!(job.metadata_path));
            for (k, v) in &inv.digests {
                row.insert(k.clone(), json!(v));
            }
            row.insert("hostModelValue".into(), json!(inv.host_model_value));
        }
        let mode = self.dispatch_mode(job);
        row.insert("backend".into(), mode["dispatchMode"].clone());
        if let Some(from) = mode.get("degradedFrom") {
            row.insert("degradedFrom".into(), from.clone());
        }
        row.extend(extra);
        Value::Object(row)
    }

    /// Launch every pending attempt (bounded by --concurrency) and wait for
    /// all of them. Returns the ended attempts not settled yet, the retries
    /// of those settled already, and whether we were interrupted.
    ///
    /// With `settle_now` (a batch without a mutation audit, where nothing
    /// waits for the whole round to end) each ended attempt is settled as
    /// soon as its slot was given to the next one, while the others run.
    #[allow(clippy::type_complexity)]
    fn run_round(
        &mut self,
        pending: &[(usize, u64)],
        settle_now: bool,
    ) -> (Vec<Ended>, Vec<(usize, u64)>, bool) {
        let mut retries = Vec::new();
        let limit = self.opts.concurrency.unwrap_or(usize::MAX).max(1);
        let mut notices = match notices::Notices::new() {
            Ok(n) => n,
            Err(e) => {
                let reason = format!("cannot watch workers: {e}");
                self.progress.line(format!("{reason}; stopping the batch"));
                let ended = pending
                    .iter()
                    .map(|&(j, a)| Ended {
                        job_index: j,
                        attempt: a,
                        outcome: Outcome::cut(reason.clone()),
                        session_id: None,
                        started: Instant::now(),
                    })
                    .collect();
                return (ended, retries, false);
            }
        };
        let mut queue: std::collections::VecDeque<(usize, u64)> = pending.iter().copied().collect();
        let mut running: HashMap<u32, Running> = HashMap::new();
        let mut ended: Vec<Ended> = Vec::new();
        let mut interrupted = false;
        loop {
            while running.len() < limit && !interrupted && !self.interrupt.load(Ordering::Relaxed) {
                let Some((i, attempt)) = queue.pop_front() else {
                    break;
                };
                if let Some(why) = self.binding_gate(i) {
                    self.refuse(i, attempt, why);
                    continue;
                }
                match self.launch(i, attempt, &mut notices) {
                    Ok(r) => {
                        running.insert(r.pid, r);
                    }
                    Err(e) => {
                        // A batch whose launch failed is stopped and settled whole.
                        let reason = format!("launch failed for {}: {e}", self.jobs[i].1.label());
                        self.progress.line(format!("{reason}; stopping the batch"));
                        let mut cut: Vec<(usize, u64, Option<String>, Instant)> = Vec::new();
                        for (_, r) in running.drain() {
                            let _ = stop_group(r.pid, self.opts.grace, &mut notices);
                            cut.push((r.job_index, r.attempt, r.session_id, r.started));
                        }
                        cut.push((i, attempt, None, Instant::now()));
                        for (j, a) in queue.drain(..) {
                            cut.push((j, a, None, Instant::now()));
                        }
                        for (j, a, s, t) in cut {
                            ended.push(Ended {
                                job_index: j,
                                attempt: a,
                                outcome: Outcome::cut(reason.clone()),
                                session_id: s,
                                started: t,
                            });
                        }
                        return (ended, retries, false);
                    }
                }
            }
            if settle_now {
                for e in ended.drain(..) {
                    retries.extend(self.settle_one(e, None));
                }
            }
            if self.progress.is_live() {
                let mut labels: Vec<&str> = running
                    .values()
                    .map(|r| self.jobs[r.job_index].1.label())
                    .collect();
                labels.sort_unstable();
                self.progress.running(&labels, ended.len(), pending.len());
            }
            if self.interrupt.load(Ordering::Relaxed) {
                interrupted = true;
                self.progress
                    .line("interrupted: stopping every worker".into());
                for (_, r) in running.drain() {
                    let _ = stop_group(r.pid, self.opts.grace, &mut notices);
                    ended.push(Ended {
                        job_index: r.job_index,
                        attempt: r.attempt,
                        outcome: Outcome::cut("interrupted"),
                        session_id: r.session_id,
                        started: r.started,
                    });
                }
                for (j, _a) in queue.drain(..) {
                    self.report(
                        j,
                        "not-run",
                        0,
                        "interrupted before it started",
                        Duration::ZERO,
                    );
                }
                break;
            }
            if running.is_empty() {
                break;
            }
            if let Some((pid, code)) = notices.next(Duration::from_millis(100)) {
                if let Some(r) = running.remove(&pid) {
                    let (_, job) = self.jobs[r.job_index];
                    self.progress.line(format!(
                        "{} exited {code} (attempt {}, {:.1}s)",
                        job.label(),
                        r.attempt,
                        r.started.elapsed().as_secs_f64()
                    ));
                    ended.push(Ended {
                        job_index: r.job_index,
                        attempt: r.attempt,
                        outcome: Outcome::exited(code),
                        session_id: r.session_id,
                        started: r.started,
                    });
                }
            }
            // Idle workers: the log has not grown for idleTimeoutSeconds.
            let idle: Vec<u32> = running
                .iter_mut()
                .filter(|(_, r)| {
                    let limit = Duration::from_secs(self.jobs[r.job_index].1.idle_timeout_seconds);
                    r.started.elapsed() >= limit
                })
                .filter_map(|(pid, r)| {
                    let limit = Duration::from_secs(self.jobs[r.job_index].1.idle_timeout_seconds);
                    (r.watch.idle_for() >= limit).then_some(*pid)
                })
                .collect();
            for pid in idle {
                if let Some(r) = running.remove(&pid) {
                    let _ = stop_group(pid, self.opts.grace, &mut notices);
                    self.progress.line(format!(
                        "{} went idle and was stopped (attempt {})",
                        self.jobs[r.job_index].1.label(),
                        r.attempt
                    ));
                    ended.push(Ended {
                        job_index: r.job_index,
                        attempt: r.attempt,
                        outcome: Outcome::timeout(),
                        session_id: r.session_id,
                        started: r.started,
                    });
                }
            }
            self.rec.maybe_flush();
        }
        (ended, retries, interrupted)
    }

    fn launch(
        &mut self,
        i: usize,
        attempt: u64,
        notices: &mut notices::Notices,
    ) -> std::io::Result<Running> {
        let job = self.jobs[i].1;
        let session_id = job
            .takes_session_id
            .then(|| uuid::Uuid::new_v4().to_string());
        let argv = self.worker_argv(job, attempt, session_id.as_deref());
        let log = self.abs(&job.log_path());
        let _ = std::fs::remove_file(self.abs(&job.status_path()));
        let env: Vec<(String, String)> = job
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let pid = match &self.pane {
            Some(pane) if job.backend == crate::model::PANE => {
                let title = match &job.identity {
                    crate::plan::Identity::V2(v) => v.execution_label.clone(),
                    crate::plan::Identity::V1 { worker_id } => format!("{worker_id}-worker"),
                };
                backend::launch_pane(
                    pane,
                    &backend::PaneLaunch {
                        argv: &argv,
                        cwd: &self.root,
                        env: &env,
                        log: &log,
                        status: &self.abs(&job.status_path()),
                        title: &title,
                    },
                    &notices.sender(),
                )?
            }
            _ => {
                let spawned = process::spawn(&process::SpawnSpec {
                    argv: &argv,
                    cwd: &self.root,
                    env: &env,
                    log: Some(&log),
                    stdin: None,
                })?;
                let pid = spawned.pid();
                notices.watch(spawned);
                pid
            }
        };
        self.rec.worker(job, WorkerStatus::InProgress, "");
        let mut extra = Map::new();
        extra.insert("pid".into(), json!(pid));
        extra.insert("startedAt".into(), json!(crate::fsutil::utc_now()));
        let row = self.dispatch_row(job, attempt, "running", "", session_id.as_deref(), extra);
        self.rec.dispatch_row(row);
        self.rec.start_attempt(job, attempt);
        let mut facts = Map::new();
        facts.insert("pid".into(), json!(pid));
        facts.insert(
            "sessionId".into(),
            json!(session_id.clone().unwrap_or_default()),
        );
        facts.insert("promptPath".into(), json!(job.prompt_path));
        facts.insert("resultPath".into(), json!(job.result_path));
        self.event("worker-dispatched", job, attempt, facts);
        self.progress.line(format!(
            "dispatched {} (attempt {attempt}, pid {pid})",
            job.label()
        ));
        Ok(Running {
            job_index: i,
            attempt,
            pid,
            started: Instant::now(),
            watch: process::LogWatch::new(log),
            session_id,
        })
    }

    /// Settle every ended attempt of a round (after the audit compare), and
    /// return the attempts to retry.
    fn settle_round(
        &mut self,
        ended: Vec<Ended>,
        snapshot: Option<&audit::Snapshot>,
        indices: &[usize],
    ) -> Vec<(usize, u64)> {
        let changes = snapshot.and_then(|s| {
            let compared = audit::compare(s, &self.audit_options());
            match compared {
                Ok(c) => Some(c.changes),
                Err(e) => {
                    self.rec
                        .problems
                        .push(format!("mutation audit compare failed: {e}"));
                    None
                }
            }
        });
        let batch: Vec<crate::plan::WritePolicy> = indices
            .iter()
            .map(|&i| self.jobs[i].1.write_policy.clone())
            .collect();
        // Every implementer's declared out-of-plan edits count for the
        // whole batch; the changes are attributed once per round.
        let declared: Vec<(usize, Vec<String>)> = indices
            .iter()
            .enumerate()
            .filter(|(_, &i)| self.jobs[i].1.role == "implementer")
            .map(|(k, &i)| {
                let result = self.abs(&self.jobs[i].1.worker_result_path);
                (k, audit::out_of_plan_edits(&result))
            })
            .collect();
        let view = changes
            .as_ref()
            .map(|c| audit::attribute(c, &batch, &declared));
        let mut retries = Vec::new();
        for e in ended {
            let own = indices.iter().position(|&i| i == e.job_index);
            let audit = view.as_ref().zip(own);
            if let Some(next) = self.settle_one(e, audit) {
                retries.push(next);
            }
        }
        self.rec.maybe_flush();
        retries
    }

    fn settle_one(
        &mut self,
        e: Ended,
        audit: Option<(&audit::Attributed, usize)>,
    ) -> Option<(usize, u64)> {
        let (_, job) = self.jobs[e.job_index];
        let attempt = e.attempt;
        let root = self.root.clone();
        let missing = settle::missing_paths(&root, &job.completion_paths);
        let worker_result = self.abs(&job.worker_result_path);
        let status_doc = read_status(&self.abs(&job.status_path()));
        let said = |k: &str| {
            status_doc
                .as_ref()
                .and_then(|d| d.get(k))
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        // The wrapper's own wall-clock limit (timeoutSeconds) is a timeout
        // too, told apart from idleness by its reason.
        let wall_clock = e.outcome.cut_short.is_none()
            && e.outcome.exit_code == crate::provider::TIMEOUT_EXIT_CODE
            && status_doc
                .as_ref()
                .and_then(|d| d.get("timedOut"))
                .and_then(Value::as_bool)
                == Some(true);
        let outcome = if wall_clock {
            Outcome::timeout()
        } else {
            e.outcome.clone()
        };
        let mut s: Settlement = settle::settle(&outcome, missing, &worker_result);
        if wall_clock {
            s.reason = said("error").unwrap_or_else(|| "wall-clock limit reached".into());
        }
        // What kind of failure the wrapper saw (argument error, not logged
        // in, API error, served-model mismatch), in the reason and so in the
        // error-log message.
        let failure_kind = said("failureKind");
        if s.status != Status::Completed && !wall_clock {
            if let Some(kind) = &failure_kind {
                let detail = said("error").unwrap_or_default();
                s.reason = if detail.is_empty() {
                    format!("{} [{kind}]", s.reason)
                } else {
                    format!("{} [{kind}]: {detail}", s.reason)
                };
            }
        }
        let duration_ms = status_doc
            .as_ref()
            .and_then(|d| d.get("duration_ms"))
            .and_then(Value::as_i64);
        let mut facts = Map::new();
        facts.insert("exitCode".into(), json!(e.outcome.exit_code));
        facts.insert("wrapperExitCode".into(), json!(e.outcome.exit_code));
        facts.insert("missingCompletionPaths".into(), json!(s.missing));
        // The served model and the CLI's own session id go on the event and
        // on the dispatch row.
        let mut reported = Map::new();
        for k in ["servedModel", "cliSessionId"] {
            if let Some(v) = said(k) {
                reported.insert(k.into(), json!(v));
            }
        }
        if let Some(kind) = &failure_kind {
            reported.insert("failureKind".into(), json!(kind));
        }
        facts.extend(reported.clone());
        // The policy recorded on the plan must still be the policy it claims.
        if crate::policy::digest_of(&job.write_policy) != job.write_policy.digest {
            s.status = Status::Error;
            s.retryable = false;
            s.reason = "the job's write policy no longer matches its recorded digest".into();
        }
        let mut retry_allowed = s.retryable;
        if let Some((view, own)) = audit.filter(|_| job.write_enforcement.mutation_audit == "batch")
        {
            // Judged after §5.3: a non-zero exit rescued by the audit-sidecar
            // contract is a success whose writes are its own, not leftovers.
            let succeeded = s.status == Status::Completed;
            let result_present = s.missing.is_empty();
            let verdict = audit::judge_in(view, own, succeeded, result_present);
            let summary = verdict.change_summary();
            facts.insert("mutationAudit".into(), summary);
            if matches!(
                verdict.status.as_str(),
                "contract-failed-unattributed" | "mutation-present-unresolved"
            ) {
                let audit = format!(
                    "mutation audit {}: {}",
                    verdict.status,
                    verdict.violations.join(", ")
                );
                // An attempt that had already failed keeps its own reason
                // first (say, the audit-sidecar failure); the audit adds to it.
                s.reason = if s.status != Status::Completed && !s.reason.is_empty() {
                    format!("{}; {audit}", s.reason)
                } else {
                    audit
                };
                s.status = Status::Error;
                s.note.clear();
                retry_allowed = false;
            } else {
                retry_allowed &= verdict.retry_allowed || verdict.status == audit::Outcome::Ok;
            }
        }
        let last_allowed = job.first_attempt() + crate::plan::MAX_ATTEMPTS as u64 - 1;
        let will_retry = retry_allowed && attempt < last_allowed;
        if s.log_error {
            let log = self.abs(&job.log_path());
            let message = if s.note.is_empty() {
                s.reason.clone()
            } else {
                s.note.clone()
            };
            let appended = self.rec.error_log(
                job,
                attempt,
                e.outcome.exit_code as i64,
                duration_ms,
                &message,
                &log,
            );
            facts.insert("errorLogAppend".into(), appended);
        }
        let status = s.status.as_str();
        let reason = if s.note.is_empty() {
            s.reason.clone()
        } else {
            s.note.clone()
        };
        facts.insert("status".into(), json!(status));
        facts.insert("reason".into(), json!(reason));
        let mut extra = Map::new();
        extra.insert("endedAt".into(), json!(crate::fsutil::utc_now()));
        extra.insert("exitCode".into(), json!(e.outcome.exit_code));
        extra.extend(reported);
        let row = self.dispatch_row(
            job,
            attempt,
            status,
            &reason,
            e.session_id.as_deref(),
            extra,
        );
        self.rec.dispatch_row(row);
        let change_summary = facts.get("mutationAudit").cloned();
        let result_path = (s.status == Status::Completed).then(|| job.worker_result_path.clone());
        self.rec
            .finish_attempt(job, attempt, status, result_path, change_summary);
        let elapsed = e.started.elapsed();
        if s.status == Status::Completed {
            self.rec.worker(job, WorkerStatus::Completed, &reason);
            self.event("worker-result-collected", job, attempt, facts);
            self.progress.line(format!(
                "{} completed (attempt {attempt}){}",
                job.label(),
                if s.note.is_empty() {
                    String::new()
                } else {
                    format!(": {}", s.note)
                }
            ));
            self.report(e.job_index, "completed", attempt, &reason, elapsed);
            return None;
        }
        self.event("worker-failed", job, attempt, facts);
        if will_retry {
            let mut facts = Map::new();
            facts.insert("missingCompletionPaths".into(), json!(s.missing));
            facts.insert("reason".into(), json!(s.reason));
            facts.insert("nextAttempt".into(), json!(attempt + 1));
            self.event("worker-retry-scheduled", job, attempt, facts);
            self.progress.line(format!(
                "{} will retry: {} (attempt {} of {last_allowed})",
                job.label(),
                s.reason,
                attempt + 1
            ));
            return Some((e.job_index, attempt + 1));
        }
        self.rec.worker(
            job,
            if s.status == Status::Timeout {
                WorkerStatus::Timeout
            } else {
                WorkerStatus::Error
            },
            &reason,
        );
        self.progress.line(format!(
            "{} {status} (attempt {attempt}): {reason}",
            job.label()
        ));
        self.report(e.job_index, status, attempt, &reason, elapsed);
        None
    }
}

pub fn read_status(path: &Path) -> Option<Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// SIGTERM the worker's group, give it `grace`, then SIGKILL; its exit
/// code. Exit notices of other workers that arrive meanwhile stay in
/// `notices` for the caller.
fn stop_group(pid: u32, grace: Duration, notices: &mut notices::Notices) -> i32 {
    // The group is looked up before the leader can exit and be reaped.
    let pgid = process::group_of(pid);
    let signal = |sig| process::signal_group(pgid, sig);
    signal(libc::SIGTERM);
    let code = notices.wait_for(pid, grace);
    // The leader is gone or out of time; make sure nothing of its group lingers.
    signal(libc::SIGKILL);
    code.or_else(|| notices.wait_for(pid, Duration::from_secs(5)))
        .unwrap_or(137)
}

/// The exit status of a finished exec.
pub fn exit_status(o: &Outcomes) -> ExitStatus {
    if o.interrupted {
        ExitStatus::Interrupted
    } else if !o.refused.is_empty() {
        ExitStatus::PlanRefused
    } else if o.reports.iter().all(|r| r.status == "completed") {
        ExitStatus::Success
    } else {
        ExitStatus::JobsFailed
    }
}
