//! The stage loop (docs/exec.md#okstra-exec): for each stage, find where the
//! records left each job, start what must start, watch, stop, settle and
//! record.
//!
//! Every attempt goes through the same steps, each a small function here:
//! [`Runner::launch_batch`] starts the wrappers of a batch held at their
//! gate and records their dispatches with one commit (per slice of a batch
//! slow to start), made durable off the loop's thread; each is let run only
//! once that commit is durable; [`Runner::wait_round`] watches them (exits,
//! idleness, Ctrl-C);
//! [`Runner::settle_round`] audits what the round changed and settles each
//! attempt through [`super::decide::decide`]; the decision is recorded
//! before anything follows from it.

use super::backend::{Backends, Dispatch, Found as Seen, Launch, Local};
use super::decide::{self, Audit, End, Facts, Status};
use super::event::{Dispatched, Event, Handle, Head, RetryScheduled, Settled, Who};
use super::jobs::Jobs;
use super::record::{Recorder, Then};
use super::replay::{self, History, Next};
use super::report::{JobReport, Notice, Reporter};
use super::settle::Left;
use super::{Options, Outcomes};
use crate::audit;
use crate::beneath::{Beneath, WriteMode};
use crate::diag::{Code, Diagnostic};
use crate::paths;
use crate::plan::{Identity, Job, Plan, MAX_ATTEMPTS};
use crate::state::journal::Sync;
use crate::state::syncer::Ticket;
use crate::state::WorkerStatus;
use crate::tmpdir;
use crate::vocab::{Backend, MutationAudit, Role};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the loop waits for an exit before it looks at idleness, the
/// interrupt flag and the live line again.
const TICK: Duration = Duration::from_millis(100);

/// How long a batch starts wrappers before those started so far are
/// recorded (one synced commit) and released. Local starts take about a
/// millisecond, so a local batch of a hundred jobs is one slice; a Slurm
/// start is an `sbatch` call of 10-25 ms, and slicing lets the first jobs
/// run while later ones are still being submitted.
const LAUNCH_SLICE: Duration = Duration::from_millis(200);

use crate::diag::WrapperExit;

/// At most how many attempts beyond `--concurrency` a round keeps recorded
/// and waiting at their gates, so that a freed slot is filled at once instead
/// of after a durable commit (see [`Runner::wait_round`]).
const READY_AHEAD_MAX: usize = 8;

/// An attempt whose wrapper runs, or waits at its gate, recorded, for a
/// slot (`held`).
struct Running {
    job: usize,
    dispatched: Dispatched,
    /// Recorded and started, but not yet let through its gate: nothing of
    /// the worker runs yet and it takes no slot.
    held: bool,
    /// The commit of its dispatch record: it may go once that is durable.
    ticket: Ticket,
    started: Instant,
    watch: crate::process::LogWatch,
}

/// The attempts of one round not yet ended: queued, waiting at their gates
/// (recorded, not yet let through) and running.
struct Round {
    queue: VecDeque<(usize, u64)>,
    /// Started attempts, waiting at their gates or running, by handle.
    running: HashMap<Handle, Running>,
    /// Those of `running` waiting at their gates, in the order recorded.
    waiting: VecDeque<Handle>,
    /// `--concurrency`: how many may run at once.
    limit: usize,
    /// How many a round keeps waiting at their gates, at most.
    ahead: usize,
}

impl Round {
    /// A round of `pending` attempts and the `running` ones it adopts,
    /// under `--concurrency` (none: every attempt at once).
    fn new(concurrency: Option<usize>, pending: Vec<(usize, u64)>, running: Vec<Running>) -> Round {
        let limit = concurrency.unwrap_or(usize::MAX).max(1);
        Round {
            queue: pending.into(),
            running: running
                .into_iter()
                .map(|r| (r.dispatched.handle, r))
                .collect(),
            waiting: VecDeque::new(),
            limit,
            ahead: ahead_of(limit),
        }
    }
}

/// How many attempts a round under `limit` keeps recorded and waiting at
/// their gates: four times its slots, at least 2 and at most
/// [`READY_AHEAD_MAX`]; none without a limit, where every attempt starts
/// at once.
fn ahead_of(limit: usize) -> usize {
    if limit == usize::MAX {
        0
    } else {
        limit.saturating_mul(4).clamp(2, READY_AHEAD_MAX)
    }
}

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

/// How one attempt is audited.
enum Judge<'v> {
    Off,
    Incomplete(String),
    /// Its verdict comes from the round's attribution, as job `k` of it.
    In(&'v audit::Attributed<'v>, usize),
}

/// A stage's audit baseline.
enum Baseline {
    /// No job of the stage is audited.
    Off,
    Taken(audit::Snapshot),
    /// It could not be taken or read back: why.
    Broken(String),
}

/// What a round's audit found, for each attempt it settles.
enum RoundAudit {
    /// No batch audit in this stage.
    Off,
    Compared(audit::Changes),
    Incomplete(String),
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
}

/// Each job's binding verdict as of a manifest modification time and length
/// (`None` verdicts: the manifest could not be read).
type BindingVerdicts = (
    Option<std::time::SystemTime>,
    u64,
    Option<Vec<Option<String>>>,
);

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
        let (audit_roots, audit_exclude) = audit_walk(root, plan, jobs, &rec);
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

    fn abs(&self, p: &str) -> PathBuf {
        paths::abs_of(&self.root, p)
    }

    fn job(&self, i: usize) -> Rc<Job> {
        self.jobs.get(i)
    }

    pub(super) fn run(mut self) -> Outcomes {
        self.resume_records();
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
            self.tell(Notice::StageStarted {
                index: si,
                of: self.plan.stages.len(),
                name: &self.plan.stages[si].name,
                jobs: indices.len(),
            });
            self.run_stage(si, &indices);
            self.end_of_stage();
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

    /// Read the events log back: each job's history, the rows a dead
    /// executor never wrote, and the records nobody should have written.
    fn resume_records(&mut self) {
        // Replayed as read: a long log is never held whole.
        let unreadable = |e: std::io::Error, me: &Self| {
            format!("cannot read {}: {e}", me.rec.events_path().display())
        };
        let mut events = match self.rec.read_events() {
            Ok(events) => events,
            Err(e) => {
                self.fatal = Some(unreadable(e, self));
                return;
            }
        };
        let replayed = replay::replay(self.plan, self.jobs, &mut events);
        if let Err(e) = events.finish() {
            self.fatal = Some(unreadable(e, self));
            return;
        }
        for f in &replayed.forged {
            let text = format!(
                "{}: a record of {} attempt {} that okstra did not write ({})",
                self.rec.events_path().display(),
                f.worker_key,
                f.attempt,
                f.why
            );
            self.forged.entry(f.stage).or_default().push(text);
        }
        self.histories = replayed.histories;
        self.usages = self
            .histories
            .iter()
            .map(|h| {
                h.attempts
                    .iter()
                    .filter_map(|a| a.settled.as_ref()?.usage.clone())
                    .collect()
            })
            .collect();
        match self.rec.reconcile(self.jobs, &self.histories) {
            Ok(0) => {}
            Ok(n) => {
                self.say(format!(
                    "team-state was behind the events log for {n} job{}: rows restored",
                    if n == 1 { "" } else { "s" }
                ));
                if let Err(e) = self.rec.flush() {
                    self.fatal = Some(format!("team-state: {e}"));
                }
            }
            Err(e) => self.fatal = Some(format!("team-state: {e}")),
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

    /// A job that ends this exec without running: reported, and given a
    /// `workers[]` row if it has none.
    fn not_run(&mut self, i: usize, reason: &str) {
        let job = self.job(i);
        self.rec.not_run(&job, reason);
        self.report(i, WorkerStatus::NotRun, 0, reason, Duration::ZERO);
    }

    fn run_stage(&mut self, si: usize, indices: &[usize]) {
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
        let baseline = match self.stage_snapshot(si, indices) {
            Ok(None) => Baseline::Off,
            Ok(Some(s)) => Baseline::Taken(s),
            Err(why) => {
                // Nothing new starts in a tree the audit cannot vouch for.
                for (i, attempt) in pending.drain(..) {
                    let reason = format!("audit/incomplete: {why}");
                    let job = self.job(i);
                    self.rec.unstarted_error(&job, &reason);
                    let first = job.first_attempt();
                    self.report(
                        i,
                        WorkerStatus::Error,
                        attempt.saturating_sub(first),
                        &reason,
                        Duration::ZERO,
                    );
                }
                Baseline::Broken(why)
            }
        };
        let settle_now = matches!(baseline, Baseline::Off);
        if !ended.is_empty() || !adopted.is_empty() {
            let (more, retries) = self.wait_round(si, Vec::new(), adopted, settle_now);
            ended.extend(more);
            pending.extend(retries);
            pending.extend(self.settle_round(si, ended, &baseline, indices));
        }
        while !pending.is_empty() && !self.interrupted && self.fatal.is_none() {
            let (ended, retries) = self.wait_round(si, pending, Vec::new(), settle_now);
            pending = retries;
            pending.extend(self.settle_round(si, ended, &baseline, indices));
        }
        let why = if self.interrupted {
            INTERRUPTED_BEFORE_START
        } else {
            STOPPED_BEFORE_START
        };
        for (i, _) in pending {
            self.not_run(i, why);
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

    /// docs/exec.md#before-anything-starts again, at the moment a v2 job
    /// starts: its role execution, participant, label and model binding must
    /// still be the manifest's. The manifest is re-read, and every job's
    /// verdict recomputed in one pass, only when its modification time or
    /// length changed.
    fn binding_gate(&mut self, i: usize) -> Option<String> {
        // Kept parsed: the job starts next (or is refused, and reported).
        self.jobs.hold(i).identity.v2()?;
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
                        .each()
                        .map(|(_, job)| super::preflight::binding_change(&manifest, &job))
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
    /// and the refusal is reported as `exec/binding-changed`.
    fn refuse(&mut self, i: usize, attempt: u64, why: String) {
        let job = self.job(i);
        let reason = format!("exec/binding-changed: {why}");
        self.say(format!("{} refused at start: {why}", job.label()));
        self.rec.refused(&job, &reason);
        self.report(
            i,
            WorkerStatus::NotRun,
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

    fn head(&self, i: usize, job: &Job, attempt: u64) -> Head {
        let (mode, degraded) = self.backend.local.mode_of(job);
        Head {
            ts: crate::fsutil::utc_now(),
            who: Who::from(&job.identity),
            attempt,
            dispatch_id: job.dispatch_id_for(attempt),
            worker_key: job.key.clone(),
            plan_digest: self.plan.digest.clone(),
            max_attempts: MAX_ATTEMPTS,
            dispatch_mode: mode,
            degraded_from: degraded,
            stage: Some(self.plan.stages[self.jobs.stage_of(i)].name.clone()),
        }
    }

    /// The wrapper argv of one attempt: the plan's command with the
    /// attempt's own flags before the provider's `--`.
    fn worker_argv(
        &self,
        job: &Job,
        attempt: u64,
        session_id: Option<&str>,
        tmp_dir: Option<&Path>,
    ) -> Vec<String> {
        let mut argv: Vec<String> = job.command.clone();
        let split = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
        let mut extra = vec![
            "--attempt".to_string(),
            attempt.to_string(),
            "--gated".to_string(),
        ];
        if let Some(id) = job.dispatch_id_for(attempt) {
            extra.extend(["--dispatch-id".into(), id]);
        }
        if let Some(s) = session_id {
            extra.extend(["--session-id".into(), s.to_string()]);
        }
        if let Some(dir) = tmp_dir {
            extra.extend(["--tmp-dir".into(), dir.display().to_string()]);
        }
        argv.splice(split..split, extra);
        argv
    }

    /// Start a batch of attempts (docs/exec.md#crash-safety-and-resume): each
    /// wrapper starts held at its gate; their dispatches are recorded and
    /// synced in one commit; only then may they go. The first `free` are let
    /// through at once; the rest stay at their gates, recorded, until a slot
    /// frees. A batch whose starts take longer than [`LAUNCH_SLICE`] goes in
    /// slices, each recorded (and its share of `free` released) before the next
    /// starts. Returns the started attempts, or the launch failure (every
    /// wrapper of its slice already stopped at its gate) with the attempts that
    /// never ran and those of earlier slices, which were recorded.
    #[allow(clippy::type_complexity)]
    fn launch_batch(
        &mut self,
        batch: Vec<(usize, u64)>,
        mut free: usize,
    ) -> Result<Vec<Running>, (String, Vec<(usize, u64)>, Vec<Running>)> {
        let mut running = Vec::with_capacity(batch.len());
        let mut todo: VecDeque<(usize, u64)> = batch.into();
        while !todo.is_empty() {
            let (held, failure) = self.start_slice(&mut todo);
            let never = |held: &[(usize, Dispatched)], todo: VecDeque<(usize, u64)>| {
                held.iter()
                    .map(|(i, d)| (*i, d.head.attempt))
                    .chain(todo)
                    .collect::<Vec<_>>()
            };
            if let Some((reason, failed)) = failure {
                // None of the slice was recorded or released: each held
                // wrapper exits at its closed gate, and the batch is cut.
                self.abandon(&held);
                todo.push_front(failed);
                return Err((reason, never(&held, todo), running));
            }
            for (i, d) in &held {
                let job = self.job(*i);
                self.rec
                    .record(&job, &Event::WorkerDispatched(d.clone()), Then::End);
            }
            crate::fault::point("dispatch-commit");
            let ticket = match self.rec.commit_ahead() {
                Ok(ticket) => ticket,
                Err(e) => {
                    // Not recorded, so not run: every held wrapper exits at
                    // its closed gate without starting anything.
                    self.abandon(&held);
                    self.fatal = Some(dispatch_unrecorded(e));
                    let reason = self.fatal.clone().unwrap_or_default();
                    return Err((reason, never(&held, todo), running));
                }
            };
            for (i, d) in held {
                let log = self.abs(&self.job(i).log_path());
                running.push(Running {
                    job: i,
                    dispatched: d,
                    held: true,
                    ticket,
                    started: Instant::now(),
                    watch: crate::process::LogWatch::new(log),
                });
            }
            // Those whose record is durable already (at once where commits
            // are synchronous) take the free slots; the rest wait at their
            // gates for the syncer, and the round lets them go.
            for r in running.iter_mut().filter(|r| r.held) {
                if free == 0 || !self.may_go(r.ticket) {
                    break;
                }
                free -= 1;
                self.release(r);
            }
        }
        Ok(running)
    }

    /// Start the wrappers of the next slice of `todo`, held at their gates,
    /// for at most [`LAUNCH_SLICE`] (at least one); and the launch that
    /// failed, if one did (why, and its attempt, taken from `todo`).
    #[allow(clippy::type_complexity)]
    fn start_slice(
        &mut self,
        todo: &mut VecDeque<(usize, u64)>,
    ) -> (Vec<(usize, Dispatched)>, Option<(String, (usize, u64))>) {
        let slice = Instant::now();
        let mut held = Vec::new();
        while let Some(&(i, attempt)) = todo.front() {
            if !held.is_empty() && slice.elapsed() >= LAUNCH_SLICE {
                break;
            }
            todo.pop_front();
            match self.start_held(i, attempt) {
                Ok(d) => held.push((i, d)),
                Err(e) => {
                    let reason = format!("launch failed for {}: {e}", self.job(i).label());
                    return (held, Some((reason, (i, attempt))));
                }
            }
        }
        (held, None)
    }

    /// Close the gates of wrappers started but never recorded: each exits
    /// without starting anything.
    fn abandon(&mut self, held: &[(usize, Dispatched)]) {
        for (_, d) in held {
            self.backend.abandon(d.handle);
        }
    }

    /// Whether an attempt recorded with `ticket` may go: its record is
    /// durable. A record that cannot be made durable stops the run.
    fn may_go(&mut self, ticket: Ticket) -> bool {
        match self.rec.durable(ticket) {
            Ok(durable) => durable,
            Err(why) => {
                self.fatal.get_or_insert(dispatch_unrecorded(why));
                false
            }
        }
    }

    /// Let a recorded attempt through its gate: from now on its worker
    /// runs, and its clocks start.
    fn release(&mut self, r: &mut Running) {
        crate::fault::point("release");
        // Told first: a reporter that notes where the attempt's output
        // starts in its log (JUnit) must look before the worker writes.
        self.tell(Notice::Recorded {
            event: &Event::WorkerDispatched(r.dispatched.clone()),
        });
        // A wrapper that died at its gate is seen as its exit.
        let _ = self.backend.release(r.dispatched.handle);
        r.held = false;
        r.started = Instant::now();
        r.watch = crate::process::LogWatch::new(r.watch.path().to_path_buf());
    }

    /// Start one attempt's wrapper, held at its gate; its dispatch record.
    fn start_held(&mut self, i: usize, attempt: u64) -> std::io::Result<Dispatched> {
        let job = self.jobs.hold(i);
        let session_id = job
            .takes_session_id
            .then(|| uuid::Uuid::new_v4().to_string());
        let tmp_dir = self.private_tmp(&job, attempt)?;
        let argv = self.worker_argv(&job, attempt, session_id.as_deref(), tmp_dir.as_deref());
        let status = self.abs(&job.status_path());
        // okstra's own writes never go through a symlink
        // (docs/exec.md#never-through-a-symlink): the log is opened here, below
        // the root, and handed to the wrapper; the sidecar of an earlier
        // attempt, which must not speak for this one, is removed the same way.
        match self
            .own
            .relative(&status)
            .and_then(|rel| self.own.remove_file(rel))
        {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let log = self.abs(&job.log_path());
        let log_file = self
            .own
            .relative(&log)
            .and_then(|rel| self.own.open_file(rel, WriteMode::Append))?;
        let env: Vec<(String, String)> = job
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let title = match &job.identity {
            Identity::V2(v) => v.execution_label.clone(),
            Identity::V1 { worker_id } => format!("{worker_id}-worker"),
        };
        // Before anything of the attempt can run: what its completion paths
        // are now, so that only what it writes counts
        // (docs/exec.md#settling-an-attempt).
        let completion_paths_before = super::artifacts::before(&self.root, &job.completion_paths)?;
        crate::fault::point("spawn");
        let started = self.backend.start(&Launch {
            job: &job,
            argv: &argv,
            cwd: &self.root,
            env: &env,
            log: &self.abs(&job.log_path()),
            log_file: &log_file,
            status: &status,
            title: &title,
        })?;
        Ok(Dispatched {
            head: self.head(i, &job, attempt),
            handle: started.handle,
            pid_start: started.pid_start,
            session_id,
            prompt_path: job.prompt_path.clone(),
            result_path: job.result_path.clone(),
            argv: started.argv,
            tmp_dir: tmp_dir.map(|d| d.display().to_string()),
            completion_paths_before,
        })
    }

    /// The private TMPDIR exec names for an attempt whose worker will be
    /// confined here (docs/confinement.md#its-private-tmpdir,
    /// [`crate::tmpdir`]), cleared of whatever an earlier start of the same
    /// attempt left there. `None` for a worker that runs unconfined, or on
    /// another machine (a Slurm node's temp directory is not exec's to reach:
    /// there the wrapper names and removes its own).
    fn private_tmp(&mut self, job: &Job, attempt: u64) -> std::io::Result<Option<PathBuf>> {
        let offer = self.offer.get_or_init(crate::confine::offer);
        let confined = crate::confine::decide(job.write_enforcement.confinement, offer);
        if job.backend == Backend::Slurm || confined != Ok(true) {
            return Ok(None);
        }
        if self.tmp_root.is_none() {
            self.tmp_root = Some(tmpdir::Root::system(&self.root)?);
        }
        let root = self.tmp_root.as_ref().expect("opened above");
        let name = self.tmp_name(job, attempt);
        root.remove(&name)?;
        Ok(Some(root.path().join(name)))
    }

    fn tmp_name(&self, job: &Job, attempt: u64) -> String {
        tmpdir::attempt_name(&self.root, self.rec.store().path(), &job.key, attempt)
    }

    /// Remove an ended attempt's private TMPDIR, whoever ended it: the
    /// wrapper removes it itself, but one killed first (the SIGKILL that
    /// ends a stop, `kill -9`) cannot. Done before the settlement is
    /// recorded, so an exec that dies in between leaves it to the next,
    /// which settles the attempt again. One that cannot be removed is
    /// reported (`exec/cleanup-incomplete`, exit 1), never passed over.
    fn remove_private_tmp(&mut self, job: &Job, d: &Dispatched) {
        let Some(recorded) = &d.tmp_dir else {
            return;
        };
        let expected = self.tmp_name(job, d.head.attempt);
        // Through the root this exec opened, where the record lies in it:
        // no path walk and no check again per attempt.
        let removed = match &self.tmp_root {
            Some(root) => root.remove_recorded(Path::new(recorded), &expected),
            None => tmpdir::remove_recorded(Path::new(recorded), &expected),
        };
        if let Err(e) = removed {
            let text = format!(
                "{} (attempt {}): its private TMPDIR was not removed: {e}",
                job.label(),
                d.head.attempt
            );
            self.say(text.clone());
            self.problems.push(
                Diagnostic::new(Code::ExecCleanupIncomplete, text)
                    .worker(job.label().to_string())
                    .help("remove it by hand once nothing of the worker runs any more (`chmod -R u+rwx` first if it holds read-only directories)"),
            );
        }
    }

    /// Run a round: launch `pending` (bounded by `--concurrency`) beside the
    /// already `running` attempts, and watch until all ended. Returns the
    /// attempts left to settle and the retries of those settled already.
    ///
    /// With `settle_now` (no batch audit in the stage: nothing waits for the
    /// round's compare) each attempt settles as soon as its slot went to the
    /// next one.
    ///
    /// Under a `--concurrency` limit the round keeps up to four times as
    /// many attempts again (at least 2, at most [`READY_AHEAD_MAX`])
    /// started and recorded, waiting at their gates: a slot that frees is
    /// filled by releasing one whose record is durable, and the commit of
    /// the next ones is made durable by the recorder's syncer thread while
    /// the loop watches the others, several at a time, instead of once per
    /// slot on the way to every start. Recorded before launch holds all the
    /// same (docs/exec.md#crash-safety-and-resume): no attempt goes before its
    /// ticket is durable; an exec that dies or is interrupted leaves the
    /// waiting ones recorded and never started, closed at their gates: the next
    /// exec starts them as the same attempts.
    fn wait_round(
        &mut self,
        si: usize,
        pending: Vec<(usize, u64)>,
        running: Vec<Running>,
        settle_now: bool,
    ) -> (Vec<Ended>, Vec<(usize, u64)>) {
        let total = pending.len() + running.len();
        let mut round = Round::new(self.opts.concurrency, pending, running);
        for r in round.running.values() {
            let status = self.abs(&self.job(r.job).status_path());
            self.backend.adopt(&r.dispatched, &status);
        }
        let mut ended: Vec<Ended> = Vec::new();
        let mut retries = Vec::new();
        let mut settled = 0;
        loop {
            if !self.interrupt.load(Ordering::Relaxed) && self.fatal.is_none() {
                if let Err((reason, never)) = self.fill(&mut round) {
                    let Round { running, queue, .. } = round;
                    return self.cut_round(reason, running, never, queue, ended, retries);
                }
            }
            if settle_now {
                for e in std::mem::take(&mut ended) {
                    settled += 1;
                    retries.extend(self.settle_one(si, e));
                }
            }
            let on: Vec<Rc<Job>> = round
                .running
                .values()
                .filter(|r| !r.held)
                .map(|r| self.job(r.job))
                .collect();
            let labels: Vec<&str> = on.iter().map(|j| j.label()).collect();
            self.tell(Notice::Running {
                labels,
                settled: settled + ended.len(),
                total,
            });
            if self.interrupt.load(Ordering::Relaxed) {
                self.interrupted = true;
                self.say("interrupted: stopping every worker".into());
                self.let_go_of_waiting(&mut round, INTERRUPTED_BEFORE_START);
                let running = std::mem::take(&mut round.running);
                ended.extend(self.stop(running.into_values().collect(), End::Interrupted));
                for (i, _) in round.queue {
                    self.not_run(i, INTERRUPTED_BEFORE_START);
                }
                break;
            }
            if self.fatal.is_some() {
                self.let_go_of_waiting(&mut round, STOPPED_BEFORE_START);
            }
            if round.running.is_empty() && (round.queue.is_empty() || self.fatal.is_some()) {
                for (i, _) in round.queue {
                    self.not_run(i, STOPPED_BEFORE_START);
                }
                break;
            }
            self.take_exits(&mut round, &mut ended);
            self.stop_idle(&mut round, &mut ended);
            if let Err(e) = self.rec.maybe_flush() {
                self.fatal.get_or_insert(format!("team-state: {e}"));
            }
        }
        (ended, retries)
    }

    /// Fill the round's free slots: first from the attempts waiting at
    /// their gates, in the order they were recorded, then by a batch from
    /// the queue, which also tops the waiting ones up once fewer than half
    /// are left (so that each commit covers several attempts). A launch
    /// failure: why, and the attempts of the batch that never ran (those
    /// that started are in `round.running`).
    fn fill(&mut self, round: &mut Round) -> Result<(), (String, Vec<(usize, u64)>)> {
        let running = &round.running;
        round
            .waiting
            .retain(|h| running.get(h).is_some_and(|r| r.held));
        let mut free = round
            .limit
            .saturating_sub(round.running.len() - round.waiting.len());
        while free > 0 {
            let Some(r) = round.waiting.front().and_then(|h| round.running.get_mut(h)) else {
                break;
            };
            if !self.may_go(r.ticket) {
                break;
            }
            self.release(r);
            round.waiting.pop_front();
            free -= 1;
        }
        if self.fatal.is_some() {
            return Ok(());
        }
        let want = if free > 0 || round.waiting.len() * 2 < round.ahead {
            free + round.ahead.saturating_sub(round.waiting.len())
        } else {
            0
        };
        let mut batch = Vec::new();
        while batch.len() < want {
            let Some((i, attempt)) = round.queue.pop_front() else {
                break;
            };
            match self.binding_gate(i) {
                Some(why) => self.refuse(i, attempt, why),
                None => batch.push((i, attempt)),
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        let (started, failed) = match self.launch_batch(batch, free) {
            Ok(started) => (started, None),
            Err((reason, never, started)) => (started, Some((reason, never))),
        };
        for r in started {
            if r.held {
                round.waiting.push_back(r.dispatched.handle);
            }
            round.running.insert(r.dispatched.handle, r);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Take the exits the backends saw (waiting up to [`TICK`] for one) as
    /// ended attempts of the round.
    fn take_exits(&mut self, round: &mut Round, ended: &mut Vec<Ended>) {
        for (handle, code) in self.backend.exits(TICK) {
            let Some(r) = round.running.remove(&handle) else {
                continue;
            };
            let job = self.job(r.job);
            self.tell(Notice::Exited {
                label: job.label(),
                attempt: r.dispatched.head.attempt,
                code,
                elapsed: r.started.elapsed(),
            });
            let status = self.abs(&job.status_path());
            let end = self.backend.ended(handle).unwrap_or_else(|| {
                if r.held {
                    End::Lost(format!(
                        "the worker wrapper ended at its gate (exit {code}): nothing ran"
                    ))
                } else {
                    wrapper_end(code, &status)
                }
            });
            ended.push(Ended {
                job: r.job,
                dispatched: r.dispatched,
                end,
                started: r.started,
            });
        }
    }

    /// Stop the round's running attempts whose log has not grown for their
    /// `idleTimeoutSeconds` (the clock starts when the job does: neither at
    /// its gate nor in a backend's queue), as ended.
    fn stop_idle(&mut self, round: &mut Round, ended: &mut Vec<Ended>) {
        let idle: Vec<Handle> = round
            .running
            .iter_mut()
            .filter_map(|(handle, r)| {
                if r.held {
                    return None;
                }
                if self.backend.queued(*handle) {
                    r.watch = crate::process::LogWatch::new(r.watch.path().to_path_buf());
                    return None;
                }
                let limit = Duration::from_secs(self.job(r.job).idle_timeout_seconds);
                (r.started.elapsed() >= limit && r.watch.idle_for() >= limit).then_some(*handle)
            })
            .collect();
        if idle.is_empty() {
            return;
        }
        let stopped: Vec<Running> = idle
            .iter()
            .filter_map(|p| round.running.remove(p))
            .collect();
        for r in &stopped {
            let job = self.job(r.job);
            self.tell(Notice::WentIdle {
                label: job.label(),
                attempt: r.dispatched.head.attempt,
            });
        }
        for e in self.stop(stopped, End::Idle) {
            let status = self.abs(&self.job(e.job).status_path());
            super::settle::mark_idle_timeout(&self.own, &status);
            ended.push(e);
        }
    }

    /// Close the gates of the attempts waiting at them, which will not be
    /// let through: each wrapper exits there, nothing of its worker having
    /// run. Their dispatches stay recorded and unsettled, so the next exec
    /// starts each as the same attempt (docs/exec.md#crash-safety-and-resume);
    /// this one reports them not run, saying `why`.
    fn let_go_of_waiting(&mut self, round: &mut Round, why: &str) {
        for h in round.waiting.drain(..) {
            if let Some(r) = round.running.remove(&h) {
                self.backend.abandon(h);
                self.not_run(r.job, why);
            }
        }
    }

    /// Stop these attempts together (one grace period for all) and hand
    /// them back as ended with `end`.
    fn stop(&mut self, running: Vec<Running>, end: End) -> Vec<Ended> {
        if running.is_empty() {
            return Vec::new();
        }
        let handles: Vec<Handle> = running.iter().map(|r| r.dispatched.handle).collect();
        self.backend.stop(&handles, self.opts.grace);
        running
            .into_iter()
            .map(|r| Ended {
                job: r.job,
                dispatched: r.dispatched,
                end: end.clone(),
                started: r.started,
            })
            .collect()
    }

    /// A launch failed (docs/exec.md#running-a-stage): every attempt already
    /// started is stopped and waited for, and every attempt of the batch,
    /// started or not, is settled `error` naming the failure.
    fn cut_round(
        &mut self,
        reason: String,
        running: HashMap<Handle, Running>,
        never: Vec<(usize, u64)>,
        queue: VecDeque<(usize, u64)>,
        mut ended: Vec<Ended>,
        retries: Vec<(usize, u64)>,
    ) -> (Vec<Ended>, Vec<(usize, u64)>) {
        self.say(format!("{reason}; stopping the batch"));
        ended.extend(self.stop(
            running.into_values().collect(),
            End::LaunchFailed(reason.clone()),
        ));
        for (i, attempt) in never.into_iter().chain(queue) {
            let job = self.job(i);
            self.rec.unstarted_error(&job, &reason);
            let first = job.first_attempt();
            self.report(
                i,
                WorkerStatus::Error,
                attempt.saturating_sub(first) + 1,
                &reason,
                Duration::ZERO,
            );
        }
        self.fatal.get_or_insert(reason);
        (ended, retries)
    }
}

/// What a later exec finds of an attempt a dead executor left in flight.
enum Found {
    Ended(Ended),
    /// Its wrapper still runs: watch it like any other.
    Running(Running),
    /// Recorded but never started: start it again, as the same attempt.
    NeverStarted(u64),
}

impl Runner<'_> {
    /// Look at the status sidecar and the process of an attempt a dead
    /// executor dispatched and never settled
    /// (docs/exec.md#crash-safety-and-resume).
    fn inspect(&mut self, i: usize, d: Dispatched) -> Found {
        let job = self.jobs.hold(i);
        let status_path = self.abs(&job.status_path());
        let attempt = d.head.attempt;
        let alive = |me: &mut Self| me.backend.find(&d) == Seen::Running;
        // A local wrapper still at its gate sees its closed pipe and exits
        // at once. (A Slurm job may pend for hours: no wait for it.)
        let deadline = Instant::now() + Duration::from_secs(5);
        while d.handle.pid().is_some()
            && !status_exists(&status_path)
            && alive(self)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = super::settle::read_status(&status_path);
        let alive = alive(self);
        let backend = &mut self.backend;
        let left = super::settle::in_flight(status.as_ref(), alive, || backend.ended(d.handle));
        let label = job.label();
        match left {
            Left::Ended(end) => {
                let how = match &end {
                    End::Exited(code) => Some(format!("exit {code}")),
                    End::Lost(_) => None,
                    _ => Some(d.handle.to_string()),
                };
                if let Some(how) = how {
                    self.say(format!(
                        "{label} (attempt {attempt}) ended while no exec watched it ({how}); settling it"
                    ));
                }
                Found::Ended(Ended {
                    job: i,
                    dispatched: d,
                    end,
                    started: Instant::now(),
                })
            }
            Left::NeverStarted => {
                self.say(format!(
                    "{label} (attempt {attempt}) was recorded but never started; starting it"
                ));
                Found::NeverStarted(attempt)
            }
            Left::Running => {
                self.say(format!(
                    "{label} (attempt {attempt}) still runs ({}); watching it",
                    d.handle
                ));
                let log = self.abs(&job.log_path());
                Found::Running(Running {
                    job: i,
                    dispatched: d,
                    held: false,
                    ticket: Ticket::DURABLE,
                    started: Instant::now(),
                    watch: crate::process::LogWatch::new(log),
                })
            }
        }
    }

    /// The stage's baseline for the mutation audit: taken before its first
    /// round, or read back when an earlier exec took it. `Ok(None)`: no job
    /// of the stage is audited. `Err`: the audit cannot vouch for the tree.
    fn stage_snapshot(
        &mut self,
        si: usize,
        indices: &[usize],
    ) -> Result<Option<audit::Snapshot>, String> {
        if !indices
            .iter()
            .any(|&i| self.job(i).write_enforcement.mutation_audit == MutationAudit::Batch)
        {
            return Ok(None);
        }
        let path = self.snapshot_path(si);
        match std::fs::read(&path) {
            // An earlier exec's baseline, read back. One that does not read
            // is never replaced by a fresh walk: that would take in whatever
            // the workers already changed.
            Ok(bytes) => {
                let s = audit::Snapshot::from_json(&bytes).map_err(|e| {
                    format!(
                        "the stage's audit baseline {} cannot be read back: {e}",
                        path.display()
                    )
                })?;
                self.rec.wrote_snapshot(&path);
                return Ok(Some(s));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "cannot read the stage's audit baseline {}: {e}",
                    path.display()
                ))
            }
        }
        // The previous stage's last compare walked the tree as it was when
        // that stage ended: nothing ran since, so it is this stage's
        // baseline (and anything written in between is caught here).
        let taken = match self.last_after.take() {
            Some(after) => after,
            None => audit::snapshot(&self.audit_options()).map_err(|e| self.incomplete(&e))?,
        };
        let text = taken.to_json();
        crate::fault::point("snapshot-write");
        self.own
            .relative(&path)
            .and_then(|rel| {
                self.own
                    .write_atomic(rel, &text, crate::fsutil::Durability::Fsync)
            })
            .map_err(|e| format!("cannot store the audit snapshot {}: {e}", path.display()))?;
        self.rec.wrote_snapshot(&path);
        Ok(Some(taken))
    }

    /// The audit could not vouch for the tree: said once as `audit/incomplete`
    /// (docs/audit.md#the-mutation-audit); what the jobs it covers settle with.
    fn incomplete(&mut self, e: &audit::AuditError) -> String {
        self.problems.push(e.diagnostic());
        e.to_string()
    }

    fn snapshot_path(&self, si: usize) -> PathBuf {
        let short = self.plan.digest.trim_start_matches("sha256:");
        self.abs(&self.plan.run.team_state_path)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
            .join("snapshots")
            .join(format!(
                "{}-stage-{}.json",
                &short[..short.len().min(16)],
                si + 1
            ))
    }

    fn audit_options(&self) -> audit::SnapshotOptions<'_> {
        audit::SnapshotOptions {
            roots: &self.audit_roots,
            project_root: &self.root,
            exclude: &self.audit_exclude,
        }
    }

    /// Settle every ended attempt of a round, after the round's audit
    /// compare; the attempts to start next.
    fn settle_round(
        &mut self,
        si: usize,
        ended: Vec<Ended>,
        baseline: &Baseline,
        indices: &[usize],
    ) -> Vec<(usize, u64)> {
        if ended.is_empty() {
            return Vec::new();
        }
        let round = match baseline {
            Baseline::Off => RoundAudit::Off,
            Baseline::Broken(why) => RoundAudit::Incomplete(why.clone()),
            Baseline::Taken(s) => match audit::compare(s, &self.audit_options()) {
                Ok(c) => {
                    self.last_after = Some(c.after);
                    RoundAudit::Compared(c.changes)
                }
                Err(e) => RoundAudit::Incomplete(self.incomplete(&e)),
            },
        };
        let mut own = self.rec.own_file_changes();
        own.extend(self.forged.remove(&si).unwrap_or_default());
        let batch: Vec<crate::plan::WritePolicy> = indices
            .iter()
            .map(|&i| self.job(i).write_policy.clone())
            .collect();
        let declared: Vec<(usize, Vec<String>)> = indices
            .iter()
            .enumerate()
            .filter(|(_, &i)| self.job(i).role == Role::Implementer)
            .map(|(k, &i)| {
                (
                    k,
                    audit::out_of_plan_edits(&self.abs(&self.job(i).worker_result_path)),
                )
            })
            .collect();
        let view = match &round {
            RoundAudit::Compared(changes) => Some(audit::attribute(changes, &batch, &declared)),
            _ => None,
        };
        let mut retries = Vec::new();
        for e in ended {
            let audited = self.job(e.job).write_enforcement.mutation_audit == MutationAudit::Batch;
            let judge = match (&round, &view) {
                (_, _) if !audited => Judge::Off,
                (RoundAudit::Incomplete(why), _) => Judge::Incomplete(why.clone()),
                (_, Some(view)) => match indices.iter().position(|&i| i == e.job) {
                    Some(k) => Judge::In(view, k),
                    None => Judge::Off,
                },
                _ => Judge::Off,
            };
            retries.extend(self.settle_with(e, judge, &own));
        }
        if let Err(e) = self.rec.maybe_flush() {
            self.fatal.get_or_insert(e);
        }
        retries
    }

    /// Settle an attempt of a stage without a batch audit, as soon as it
    /// ended; okstra's own files are checked on the spot.
    fn settle_one(&mut self, si: usize, e: Ended) -> Option<(usize, u64)> {
        let mut own = self.rec.own_file_changes();
        own.extend(self.forged.remove(&si).unwrap_or_default());
        let next = self.settle_with(e, Judge::Off, &own);
        if let Err(e) = self.rec.maybe_flush() {
            self.fatal.get_or_insert(e);
        }
        next
    }

    /// Gather the facts of an ended attempt, decide, record, report; the
    /// attempt that follows, if one does.
    fn settle_with(&mut self, e: Ended, judge: Judge, own: &[String]) -> Option<(usize, u64)> {
        let i = e.job;
        let job = self.job(i);
        let attempt = e.dispatched.head.attempt;
        let first = job.first_attempt();
        self.remove_private_tmp(&job, &e.dispatched);
        let (mut facts, report) = self.facts_of(&job, &e);
        let summary;
        (facts.audit, summary) = audit_of(&facts, judge, own);
        let d = decide::decide(&facts);
        let wrapper_code = match e.end {
            End::Exited(c) => Some(c),
            _ => None,
        };
        let error_log_append = d.log_error.then(|| {
            let code = d.exit_code.or(wrapper_code).unwrap_or(1);
            let log = self.abs(&job.log_path());
            self.rec.error_log(
                &job,
                attempt,
                i64::from(code),
                report.duration_ms,
                &d.reason,
                (&log, report.log_offset),
            )
        });
        let settled = Settled {
            head: self.head_from(&e.dispatched),
            status: d.status,
            reason: d.reason.clone(),
            exit_code: d.exit_code.or(wrapper_code),
            wrapper_exit_code: wrapper_code,
            missing_completion_paths: facts.missing.iter().map(|m| m.path.clone()).collect(),
            served_model: report.served_model,
            cli_session_id: report.cli_session_id,
            failure_kind: d.failure_kind.clone(),
            cli_argv: report.argv,
            usage: report.usage.clone(),
            confinement: report.confinement,
            resumable: d.resumable,
            mutation_audit: summary,
            error_log_append,
        };
        self.usages[i].extend(report.usage);
        // A lost attempt found by this exec resumes at once; an interrupted
        // one is for the next exec.
        let resume_now = d.resumable && !self.interrupted && matches!(e.end, End::Lost(_));
        let next = (d.retry || resume_now).then_some(attempt + 1);
        let event = if d.status == Status::Completed {
            Event::WorkerResultCollected(settled)
        } else {
            Event::WorkerFailed(settled)
        };
        let then = if next.is_some() {
            Then::Retry
        } else {
            Then::End
        };
        self.rec.record_settled(&job, &e.dispatched, &event, then);
        self.tell(Notice::Recorded { event: &event });
        if d.retry {
            let retry = Event::WorkerRetryScheduled(RetryScheduled {
                head: self.head_from(&e.dispatched),
                missing_completion_paths: facts.missing.iter().map(|m| m.path.clone()).collect(),
                reason: d.reason.clone(),
                next_attempt: attempt + 1,
            });
            self.rec.record(&job, &retry, Then::Retry);
            self.tell(Notice::Recorded { event: &retry });
        }
        if d.resumable {
            self.histories[i].note_resumable();
        }
        crate::fault::point("settle-commit");
        if let Err(err) = self.rec.commit(Sync::None) {
            self.fatal
                .get_or_insert(format!("cannot record a settlement: {err}"));
            return None;
        }
        if next.is_none() {
            let attempts = attempt + 1 - first;
            self.report(i, d.status.into(), attempts, &d.reason, e.started.elapsed());
        }
        next.map(|a| (i, a))
    }

    /// What an ended attempt's settlement weighs
    /// (docs/exec.md#settling-an-attempt), read from disk, its audit not yet
    /// judged; and what its status sidecar says.
    fn facts_of(&self, job: &Job, e: &Ended) -> (Facts, super::settle::StatusReport) {
        let status_doc = super::settle::read_status(&self.abs(&job.status_path()));
        let report = super::settle::StatusReport::of(status_doc.as_ref(), &e.end);
        let missing = super::artifacts::judge(
            &self.root,
            &job.completion_paths,
            &e.dispatched.completion_paths_before,
            e.dispatched.head.attempt,
            job.first_attempt(),
        );
        let worker_result = self.abs(&job.worker_result_path);
        let audit_sidecar = decide::needs_audit_sidecar(&e.end, &missing)
            .then(|| super::settle::audit_sidecar_failure(&worker_result));
        let facts = Facts {
            end: e.end.clone(),
            sidecar: report.sidecar.clone(),
            missing,
            audit_sidecar,
            audit: Audit::None,
            policy_intact: crate::policy::digest_of(&job.write_policy) == job.write_policy.digest,
            attempt: e.dispatched.head.attempt,
            last_allowed: self.histories[e.job].last_allowed(job.first_attempt()),
            last_words: (e.end == End::Idle)
                .then(|| {
                    super::settle::last_log_line(&self.abs(&job.log_path()), report.log_offset)
                })
                .flatten(),
        };
        (facts, report)
    }

    fn head_from(&self, d: &Dispatched) -> Head {
        Head {
            ts: crate::fsutil::utc_now(),
            ..d.head.clone()
        }
    }
}

/// Why the run stops when a batch's dispatch records could not be written
/// or made durable: none of its attempts starts.
fn dispatch_unrecorded(why: impl std::fmt::Display) -> String {
    format!("cannot record the dispatch of a batch: {why}")
}

/// The audit's verdict on an attempt (docs/audit.md#the-mutation-audit), and
/// the summary of its changes for the record, as `judge` says it is judged. It
/// judges after docs/exec.md#settling-an-attempt: a non-zero exit rescued by
/// the audit-sidecar contract is a success whose writes are its own. okstra's
/// own files changed by someone else (`own`) fail every attempt the audit could
/// judge.
fn audit_of(facts: &Facts, judge: Judge, own: &[String]) -> (Audit, Option<Value>) {
    let (audit, summary) = match judge {
        Judge::Off => (Audit::None, None),
        Judge::Incomplete(why) => (Audit::Incomplete(why), None),
        Judge::In(view, k) => {
            // An attempt cut short through no fault of its own (exec
            // interrupted or died) answers for writes outside its policy
            // only: its partial work is its own, and the next attempt
            // takes it over.
            let before = decide::decide(facts);
            let succeeded = before.status == Status::Completed || before.resumable;
            let verdict = audit::judge_in(view, k, succeeded, facts.missing.is_empty());
            let audit = Audit::Judged {
                status: verdict.status,
                violations: verdict.violations.clone(),
                retry_allowed: verdict.retry_allowed,
            };
            (audit, Some(verdict.change_summary()))
        }
    };
    if own.is_empty() || matches!(audit, Audit::Incomplete(_)) {
        return (audit, summary);
    }
    let failed = Audit::Judged {
        status: audit::Outcome::ContractFailedUnattributed,
        violations: own.to_vec(),
        retry_allowed: false,
    };
    (failed, summary)
}

/// How a wrapper's exit code reads. 75: its gate closed unreleased, and 74
/// with no status sidecar: it could not record its start; either way nothing
/// of the worker ran. 74 with a sidecar: the worker ran, but its end could
/// not be recorded. All three are no fault of the worker: resumable.
fn wrapper_end(code: i32, status: &Path) -> End {
    match WrapperExit::from_code(code) {
        Some(WrapperExit::NeverReleased) => End::Lost(format!(
            "the worker wrapper exited {code} at its gate: nothing ran"
        )),
        Some(WrapperExit::StatusWriteFailed) if !status_exists(status) => End::Lost(format!(
            "the worker wrapper exited {code}: it could not record its start, so nothing ran"
        )),
        Some(WrapperExit::StatusWriteFailed) => End::Lost(format!(
            "the worker wrapper exited {code}: it could not record how the worker ended"
        )),
        _ => End::Exited(code),
    }
}

fn status_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// What every audit walk of the run covers and leaves out: the project root
/// and every worktree outside it, minus okstra's own files (which are
/// checked against what exec wrote instead).
fn audit_walk(
    root: &Path,
    plan: &Plan,
    jobs: &Jobs,
    rec: &Recorder,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let abs = |p: &str| paths::abs_of(root, p);
    // Each implementer may have a worktree of its own outside the project:
    // a set keeps the check linear in the number of jobs.
    let mut roots = vec![root.to_path_buf()];
    let mut outside = HashSet::new();
    for (_, job) in jobs.each() {
        if let Some(w) = &job.worktree_path {
            let w = abs(w);
            if !w.starts_with(root) && outside.insert(w.clone()) {
                roots.push(w);
            }
        }
    }
    let store = rec.store();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_keeps_four_times_its_slots_waiting_within_bounds() {
        assert_eq!(ahead_of(1), 4);
        assert_eq!(ahead_of(2), 8);
        assert_eq!(ahead_of(3), READY_AHEAD_MAX, "at most");
        assert_eq!(ahead_of(usize::MAX - 1), READY_AHEAD_MAX, "no overflow");
        assert_eq!(ahead_of(usize::MAX), 0, "no limit: all start at once");
    }
}
