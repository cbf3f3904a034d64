//! The stage loop (docs/exec.md#okstra-exec): for each stage, find where the
//! records left each job, start what must start, watch, stop, settle and
//! record.
//!
//! This file holds the loop and the runner's state; its rooms hold the
//! steps: `resume` (where an earlier exec left each job), `round` (start
//! held, record, let go once durable, watch, stop), `start` (one attempt's
//! wrapper), `gate` (the binding gate at each start), `private_dir`,
//! `stage_audit` (the stage's baseline and each attempt's verdict) and
//! `settlement` (decide, record, report). Every decision is recorded
//! before anything follows from it.

use super::backend::{Backends, Dispatch, Local};
use super::decide::End;
use super::event::{Dispatched, StageSnapshot};
use super::jobs::Jobs;
use super::record::Recorder;
use super::replay::{History, Next};
use super::report::{JobReport, Notice, Reporter};
use super::{Options, Outcomes};
use crate::audit;
use crate::beneath::Beneath;
use crate::diag::Diagnostic;
use crate::paths;
use crate::plan::{Job, Plan};
use crate::state::journal::Sync;
use crate::state::WorkerStatus;
use crate::tmpdir;
use crate::vocab::Backend;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod budget;
mod egress;
mod gate;
mod private_dir;
mod resume;
mod round;
mod settlement;
mod stage_audit;
mod start;
mod worktrees;

use gate::BindingVerdicts;
use resume::Found;
use round::Running;
use stage_audit::{audit_walk, Baseline};

/// Why a job that never started is reported not run.
const INTERRUPTED_BEFORE_START: &str = "interrupted before it started";
const STOPPED_BEFORE_START: &str =
    "the run stopped before it started: a record could not be written";

/// An attempt that ended and waits to be settled.
struct Ended {
    job: usize,
    dispatched: Dispatched,
    end: End,
    started: Instant,
}

pub(super) struct Runner<'a> {
    root: PathBuf,
    plan: &'a Plan,
    opts: &'a Options,
    /// Every job in plan order.
    jobs: &'a Jobs,
    rec: Recorder,
    backend: Backends,
    reporters: Vec<Box<dyn Reporter>>,
    interrupt: Arc<AtomicBool>,
    interrupted: bool,
    histories: Vec<History>,
    /// Each stage's baseline as the events log records it
    /// ([`super::baseline`]).
    baselines: Vec<Option<StageSnapshot>>,
    /// What each job's settled attempts of this plan spent, as recorded
    /// (by earlier execs too): its report's usage.
    usages: Vec<Vec<crate::provider::Usage>>,
    /// Records of the log no executor wrote, by the stage they fall into.
    forged: HashMap<usize, Vec<String>>,
    reports: Vec<Option<JobReport>>,
    refused: Vec<Diagnostic>,
    /// Problems the run reports besides each job's reason (`audit/incomplete`).
    problems: Vec<Diagnostic>,
    /// A record that could not be written: the run stops.
    fatal: Option<String>,
    audit_roots: Vec<PathBuf>,
    audit_exclude: Vec<PathBuf>,
    manifest_cache: Option<BindingVerdicts>,
    /// The tree as the last compare of the stage found it: the next stage's
    /// baseline when it starts right after.
    last_after: Option<audit::Snapshot>,
    /// The project root, for okstra's own writes below it.
    own: std::sync::Arc<Beneath>,
    /// What confinement this kernel offers, asked at the first start.
    offer: std::cell::OnceCell<crate::confine::Offer>,
    /// Where this exec makes private TMPDIRs, opened at the first start
    /// of a confined worker.
    tmp_root: Option<tmpdir::Root>,
    /// The egress proxy and the doors of the attempts running through it.
    doors: egress::Doors,
    /// The repository and the worktrees of `worktree = "git"` jobs.
    trees: worktrees::Trees,
    /// The run's budget is spent (docs/exec.md#budgets): why, as said.
    over_budget: Option<String>,
    /// When running attempts' spend was last read, and what it was.
    spend_read_at: Option<Instant>,
    running_spend: Vec<crate::provider::Usage>,
}

impl<'a> Runner<'a> {
    pub(super) fn new(
        verified: &'a super::Verified,
        opts: &'a Options,
        rec: Recorder,
        own: std::sync::Arc<Beneath>,
        reporters: Vec<Box<dyn Reporter>>,
        interrupt: Arc<AtomicBool>,
    ) -> Runner<'a> {
        let super::Verified {
            plan,
            jobs,
            root,
            manifest_stamp,
        } = verified;
        let (audit_roots, mut audit_exclude, git_worktrees) = audit_walk(root, plan, jobs, &rec);
        let (mut trees, own_refs) = worktrees::Trees::open(root, git_worktrees);
        audit_exclude.extend(own_refs);
        trees.fixed_exclusions = audit_exclude.len();
        let n = jobs.len();
        let mut backend = Backends::new(Local::new(opts.worker.clone()));
        let mut rec = rec;
        if let Ok(waker) = backend.local.waker() {
            // Dispatch commits are made durable while the loop watches the
            // workers; each one done wakes it to let their attempts go.
            rec.sync_off_thread(Box::new(move || waker.wake()));
        }
        if jobs.uses(Backend::Slurm) {
            backend.add(
                Backend::Slurm,
                Box::new(super::backend::slurm::Slurm::new(opts.worker.clone(), plan)),
            );
        }
        Runner {
            root: root.to_path_buf(),
            plan,
            opts,
            jobs,
            rec,
            backend,
            reporters,
            interrupt,
            interrupted: false,
            histories: vec![History::default(); n],
            baselines: vec![None; plan.stages.len()],
            usages: vec![Vec::new(); n],
            forged: HashMap::new(),
            reports: vec![None; n],
            refused: Vec::new(),
            problems: Vec::new(),
            fatal: None,
            audit_roots,
            audit_exclude,
            // Every binding held when the plan was verified: the manifest is
            // read again only once it moved.
            manifest_cache: manifest_stamp.map(|(t, l)| (Some(t), l, Some(vec![None; jobs.len()]))),
            last_after: None,
            own,
            offer: std::cell::OnceCell::new(),
            tmp_root: None,
            doors: egress::Doors::default(),
            trees,
            over_budget: None,
            spend_read_at: None,
            running_spend: Vec::new(),
        }
    }

    fn tell(&mut self, notice: Notice) {
        for r in &mut self.reporters {
            r.notice(&notice);
        }
    }

    fn say(&mut self, text: String) {
        self.tell(Notice::Said { text });
    }

    /// Say what the backends have to tell since they were last asked.
    fn hear_backends(&mut self) {
        for text in self.backend.said() {
            self.say(text);
        }
    }

    fn abs(&self, p: &str) -> PathBuf {
        paths::abs_of(&self.root, p)
    }

    fn job(&self, i: usize) -> Rc<Job> {
        self.jobs.get(i)
    }

    pub(super) fn run(mut self) -> Outcomes {
        self.resume_records();
        self.hear_backends();
        if self.jobs.uses(Backend::Pane) {
            let line = self.backend.local.detect_pane();
            self.say(line);
        }
        let mut blocked: Option<&'static str> = None;
        for si in 0..self.plan.stages.len() {
            let indices: Vec<usize> = (0..self.jobs.len())
                .filter(|&i| self.jobs.stage_of(i) == si)
                .collect();
            if self.interrupt.load(Ordering::Relaxed) {
                self.interrupted = true;
            }
            if self.interrupted {
                blocked = Some("interrupted before its stage started");
            } else if self.fatal.is_some() {
                blocked = Some("the run stopped: a record could not be written");
            }
            if let Some(reason) = blocked {
                for &i in &indices {
                    self.not_run(i, reason);
                }
                continue;
            }
            if let Some(reason) = self.over_budget.clone() {
                for &i in &indices {
                    self.not_run(i, &reason);
                }
                continue;
            }
            self.tell(Notice::StageStarted {
                index: si,
                of: self.plan.stages.len(),
                name: &self.plan.stages[si].name,
                jobs: indices.len(),
            });
            self.run_stage(si, &indices);
            self.hear_backends();
            self.end_of_stage();
            self.remove_committed_worktrees(&indices);
            let done = indices.iter().all(|&i| {
                self.reports[i]
                    .as_ref()
                    .is_some_and(|r| r.status == WorkerStatus::Completed)
            });
            if !done && blocked.is_none() {
                blocked = Some("an earlier stage did not complete");
            }
        }
        if let Err(e) = self.rec.flush_if_dirty() {
            self.fatal.get_or_insert(format!("team-state: {e}"));
        }
        let jobs = self.jobs;
        let reports = self
            .reports
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| JobReport {
                    stage: self.plan.stages[jobs.stage_of(i)].name.clone(),
                    key: jobs.key(i).to_string(),
                    label: jobs.get(i).label().to_string(),
                    status: WorkerStatus::NotRun,
                    attempts: 0,
                    reason: "not reached".into(),
                    duration: Duration::ZERO,
                    usage: None,
                })
            })
            .collect();
        Outcomes {
            reports,
            interrupted: self.interrupted,
            refused: self.refused,
            problems: self.problems,
            fatal: self.fatal,
        }
    }

    fn report(
        &mut self,
        i: usize,
        status: WorkerStatus,
        attempts: u64,
        reason: &str,
        duration: Duration,
    ) {
        let job = self.job(i);
        let report = JobReport {
            stage: self.plan.stages[self.jobs.stage_of(i)].name.clone(),
            key: job.key.clone(),
            label: job.label().to_string(),
            status,
            attempts,
            reason: reason.to_string(),
            duration,
            usage: crate::provider::UsageTotal::of(&self.usages[i]),
        };
        self.tell(Notice::Finished { report: &report });
        self.reports[i] = Some(report);
        self.jobs.forget(i);
    }

    /// A job refused before its attempt started (`reason` starts with the
    /// code): settled `error` on its row, and reported.
    fn unstarted_error(&mut self, i: usize, attempt: u64, reason: &str) {
        let job = self.job(i);
        self.rec.unstarted_error(&job, reason);
        let attempts = attempt.saturating_sub(job.first_attempt());
        self.report(i, WorkerStatus::Error, attempts, reason, Duration::ZERO);
    }

    /// A job that ends this exec without running: reported, and given a
    /// `workers[]` row if it has none.
    fn not_run(&mut self, i: usize, reason: &str) {
        let job = self.job(i);
        self.rec.not_run(&job, reason);
        self.report(i, WorkerStatus::NotRun, 0, reason, Duration::ZERO);
    }

    fn run_stage(&mut self, si: usize, indices: &[usize]) {
        crate::fault::point("stage-start");
        let mut pending: Vec<(usize, u64)> = Vec::new();
        let mut adopted: Vec<Running> = Vec::new();
        let mut ended: Vec<Ended> = Vec::new();
        for &i in indices {
            let job = self.job(i);
            match self.histories[i].next() {
                Next::Fresh => pending.push((i, job.first_attempt())),
                Next::Start { attempt } => pending.push((i, attempt)),
                Next::Completed { attempt } => {
                    self.say(format!(
                        "{} already completed (attempt {attempt}); not run again",
                        job.label()
                    ));
                    self.report(
                        i,
                        WorkerStatus::Completed,
                        attempt,
                        "completed by an earlier exec",
                        Duration::ZERO,
                    );
                }
                Next::Failed {
                    attempt,
                    status,
                    reason,
                } => self.report(i, status.into(), attempt, &reason, Duration::ZERO),
                Next::InFlight { dispatched } => match self.inspect(i, *dispatched) {
                    Found::Ended(e) => ended.push(e),
                    Found::Running(r) => adopted.push(r),
                    Found::NeverStarted(attempt) => pending.push((i, attempt)),
                },
            }
        }
        let in_flight: Vec<usize> = ended
            .iter()
            .map(|e| e.job)
            .chain(adopted.iter().map(|r| r.job))
            .collect();
        self.prepare_worktrees(&mut pending, &in_flight);
        if self.interrupted && in_flight.is_empty() {
            // Cut short while its worktrees were made: no baseline is
            // taken of a tree a killed git may have left half-made.
            for (i, _) in pending {
                self.not_run(i, INTERRUPTED_BEFORE_START);
            }
            return;
        }
        let busy = !(pending.is_empty() && ended.is_empty() && adopted.is_empty());
        let baseline = self.stage_baseline(si, indices, busy, &mut pending);
        let settle_now = matches!(baseline, Baseline::Off);
        if !ended.is_empty() || !adopted.is_empty() {
            let (more, retries) = self.wait_round(si, Vec::new(), adopted, settle_now);
            ended.extend(more);
            pending.extend(retries);
            pending.extend(self.settle_round(si, ended, &baseline, indices));
        }
        while !pending.is_empty()
            && !self.interrupted
            && self.fatal.is_none()
            && self.over_budget.is_none()
        {
            let (ended, retries) = self.wait_round(si, pending, Vec::new(), settle_now);
            pending = retries;
            pending.extend(self.settle_round(si, ended, &baseline, indices));
        }
        let why = match (self.interrupted, self.budget_reason()) {
            (true, _) => INTERRUPTED_BEFORE_START.to_string(),
            (false, Some(spent)) => spent.to_string(),
            (false, None) => STOPPED_BEFORE_START.to_string(),
        };
        for (i, _) in pending {
            self.not_run(i, &why);
        }
    }

    /// Records reach the disk at a stage's end; team-state is written.
    fn end_of_stage(&mut self) {
        if let Err(e) = self.rec.commit(Sync::Data) {
            self.fatal.get_or_insert(e.to_string());
        }
        if let Err(e) = self.rec.flush() {
            self.fatal.get_or_insert(format!("team-state: {e}"));
        }
    }
}
