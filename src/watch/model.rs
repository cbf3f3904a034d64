//! What `okstra watch` knows of a run: one [`Job`] per job, built by
//! replaying the events log line by line ([`Model::apply`]) and filled in
//! from team-state ([`Model::adopt_workers`]) and the running attempts'
//! status sidecars ([`Model::set_live`]). Pure: no file is read here, so
//! every rule has a test with its events written out.

use crate::exec::event::{Event, Head};
use crate::provider::{Usage, UsageTotal};
use crate::state::{AttemptStatus, WorkerStatus};
use std::collections::{BTreeMap, HashMap};

/// Where a job stands, as the watch shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Its attempt is dispatched and not settled.
    Running,
    /// Its wrapper recorded the attempt's end (its status sidecar), and
    /// exec has not settled it yet (a batch settles once all of it ended).
    Exited,
    /// Its attempt failed and another one is scheduled.
    Retrying,
    Completed,
    Error,
    Timeout,
    /// Team-state says it never ran (a stage that stopped early).
    NotRun,
    /// Team-state says it is in progress, and no event of it was read.
    InProgress,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Running => "running",
            Phase::Exited => "exited",
            Phase::Retrying => "retrying",
            Phase::Completed => "completed",
            Phase::Error => "error",
            Phase::Timeout => "timeout",
            Phase::NotRun => "not-run",
            Phase::InProgress => "in-progress",
        }
    }

    /// The phase as shown: an open one that no exec holds any more is
    /// `unsettled` (the next exec settles it).
    pub fn shown(self, exec_running: bool) -> &'static str {
        match self {
            p if p.is_open() && !exec_running => "unsettled",
            p => p.as_str(),
        }
    }

    /// Whether the job is still under way: an exec is (or was) at it.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            Phase::Running | Phase::Exited | Phase::Retrying | Phase::InProgress
        )
    }
}

impl From<AttemptStatus> for Phase {
    fn from(s: AttemptStatus) -> Phase {
        match s {
            AttemptStatus::Completed => Phase::Completed,
            AttemptStatus::Timeout => Phase::Timeout,
            AttemptStatus::Error => Phase::Error,
        }
    }
}

impl From<WorkerStatus> for Phase {
    fn from(s: WorkerStatus) -> Phase {
        match s {
            WorkerStatus::NotRun => Phase::NotRun,
            WorkerStatus::InProgress => Phase::InProgress,
            WorkerStatus::Completed => Phase::Completed,
            WorkerStatus::Timeout => Phase::Timeout,
            WorkerStatus::Error => Phase::Error,
        }
    }
}

/// One job of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its state key (`workerKey`).
    pub key: String,
    /// Who it is to people: its execution label (v2), else its worker id.
    pub label: String,
    /// Its stage, as an index for [`Model::stage_name`], where known.
    pub stage: Option<usize>,
    pub phase: Phase,
    /// Its latest attempt (0: none dispatched).
    pub attempt: u64,
    /// When its latest attempt was dispatched, in Unix seconds.
    pub started: Option<i64>,
    /// When its latest attempt settled, in Unix seconds.
    pub ended: Option<i64>,
    /// Its prompt, as the dispatch names it: its log and status sidecar
    /// are beside it.
    pub prompt: Option<String>,
    pub reason: String,
    /// The plan its latest event belongs to.
    pub plan_digest: String,
    /// What each settled attempt spent, by attempt number.
    settled: BTreeMap<u64, Usage>,
    /// What the running attempt has spent so far (its status sidecar).
    live: Option<Usage>,
}

impl Job {
    fn new(key: &str) -> Job {
        Job {
            key: key.to_string(),
            label: key.to_string(),
            stage: None,
            phase: Phase::NotRun,
            attempt: 0,
            started: None,
            ended: None,
            prompt: None,
            reason: String::new(),
            plan_digest: String::new(),
            settled: BTreeMap::new(),
            live: None,
        }
    }

    /// What the job spent: its settled attempts and its running one so far;
    /// `None` where none reported usage.
    pub fn spent(&self) -> Option<UsageTotal> {
        UsageTotal::of(self.settled.values().chain(self.live.as_ref()))
    }

    /// How long its latest attempt ran, or has run by `now` (Unix seconds).
    pub fn elapsed(&self, now: i64) -> Option<i64> {
        let start = self.started?;
        let end = match self.ended {
            Some(end) => end,
            None if self.phase.is_open() => now,
            None => return None,
        };
        Some((end - start).max(0))
    }
}

/// The run as the events log and team-state tell it.
#[derive(Debug, Default)]
pub struct Model {
    jobs: Vec<Job>,
    by_key: HashMap<String, usize>,
    /// Stage names in plan order (as numbered by their baselines, else as
    /// first seen).
    stages: Vec<String>,
    stage_numbers: HashMap<String, usize>,
    /// The plan of the latest dispatch or baseline: the run being watched.
    pub plan_digest: String,
    /// The first and the latest event's time of the watched plan.
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// The jobs in display order (stage, then first seen), rebuilt when a
    /// job or stage is added.
    order: Vec<usize>,
    order_stale: bool,
}

/// Unix seconds of an RFC 3339 time; `None` where it is not one.
pub fn unix_of(ts: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(ts).ok()?;
    let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

impl Model {
    /// The jobs of the watched plan (and those team-state alone names), in
    /// display order.
    pub fn jobs(&mut self) -> impl Iterator<Item = &Job> + '_ {
        self.sort();
        self.listed()
    }

    /// [`Self::jobs`] as last sorted ([`Self::sort`]).
    pub fn listed(&self) -> impl Iterator<Item = &Job> + '_ {
        self.order
            .iter()
            .map(|&i| &self.jobs[i])
            .filter(|j| self.watched(j))
    }

    /// How many jobs [`Self::listed`] yields.
    pub fn len(&self) -> usize {
        self.listed().count()
    }

    /// Whether no job is known.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Whether `job` belongs to the watched plan (or to none known).
    fn watched(&self, job: &Job) -> bool {
        job.plan_digest.is_empty()
            || self.plan_digest.is_empty()
            || job.plan_digest == self.plan_digest
    }

    /// The job with state key `key`.
    pub fn job(&self, key: &str) -> Option<&Job> {
        self.by_key.get(key).map(|&i| &self.jobs[i])
    }

    /// Stage `i`'s name.
    pub fn stage_name(&self, i: usize) -> &str {
        self.stages.get(i).map_or("", String::as_str)
    }

    /// Put the jobs in display order, where one was added since.
    pub fn sort(&mut self) {
        if !self.order_stale {
            return;
        }
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        let rank = |s: Option<usize>| match s {
            Some(i) => self
                .stage_numbers
                .get(&self.stages[i])
                .copied()
                .unwrap_or(usize::MAX / 2 + i),
            None => usize::MAX,
        };
        order.sort_by_key(|&i| rank(self.jobs[i].stage));
        self.order = order;
        self.order_stale = false;
    }

    fn stage_index(&mut self, name: &str) -> usize {
        match self.stages.iter().position(|s| s == name) {
            Some(i) => i,
            None => {
                self.stages.push(name.to_string());
                self.order_stale = true;
                self.stages.len() - 1
            }
        }
    }

    fn job_mut(&mut self, key: &str) -> &mut Job {
        let i = match self.by_key.get(key) {
            Some(&i) => i,
            None => {
                self.jobs.push(Job::new(key));
                self.by_key.insert(key.to_string(), self.jobs.len() - 1);
                self.order_stale = true;
                self.jobs.len() - 1
            }
        };
        &mut self.jobs[i]
    }

    fn note_time(&mut self, ts: &str, digest: &str) {
        if digest != self.plan_digest {
            self.plan_digest = digest.to_string();
            self.first_ts = None;
        }
        if let Some(t) = unix_of(ts) {
            self.first_ts.get_or_insert(t);
            self.last_ts = Some(t);
        }
    }

    /// The job `head` is about, its stage noted, reset where it now runs
    /// under another plan.
    fn job_of(&mut self, head: &Head) -> &mut Job {
        let stage = head.stage.as_deref().map(|s| self.stage_index(s));
        let job = self.job_mut(&head.worker_key);
        if job.plan_digest != head.plan_digest {
            *job = Job::new(&head.worker_key);
            job.plan_digest = head.plan_digest.clone();
        }
        job.label = head
            .who
            .execution_label
            .clone()
            .or_else(|| head.who.worker_id.clone())
            .unwrap_or_else(|| head.worker_key.clone());
        if stage.is_some() {
            job.stage = stage;
        }
        job
    }

    /// Replay one line of the events log.
    pub fn apply(&mut self, event: &Event) {
        if let Event::StageSnapshotWritten(s) = event {
            self.note_time(&s.ts, &s.plan_digest);
            self.stage_index(&s.stage);
            self.stage_numbers.insert(s.stage.clone(), s.stage_number);
            self.order_stale = true;
            return;
        }
        let Some(head) = event.head() else {
            return;
        };
        match event {
            Event::WorkerDispatched(d) => {
                self.note_time(&head.ts, &head.plan_digest);
                let job = self.job_of(head);
                job.phase = Phase::Running;
                job.attempt = head.attempt;
                job.started = unix_of(&head.ts);
                job.ended = None;
                job.reason.clear();
                job.live = None;
                job.prompt = Some(d.prompt_path.clone());
            }
            Event::WorkerFailed(s) | Event::WorkerResultCollected(s) => {
                self.note_time(&head.ts, &head.plan_digest);
                let job = self.job_of(head);
                if let Some(u) = &s.usage {
                    job.settled.insert(head.attempt, u.clone());
                }
                if head.attempt >= job.attempt {
                    job.attempt = head.attempt;
                    job.phase = s.status.into();
                    job.ended = unix_of(&head.ts);
                    job.reason = s.reason.clone();
                    job.live = None;
                }
            }
            Event::WorkerRetryScheduled(r) => {
                self.note_time(&head.ts, &head.plan_digest);
                let job = self.job_of(head);
                if head.attempt >= job.attempt {
                    job.phase = Phase::Retrying;
                    job.reason = r.reason.clone();
                }
            }
            Event::EgressRefused(_) | Event::StageSnapshotWritten(_) => {}
        }
    }

    /// Jobs team-state names that no event did (a stage that never
    /// started, rows a lead wrote): `(key, label, stage, status, reason)`.
    pub fn adopt_workers<'a>(&mut self, rows: impl IntoIterator<Item = WorkerRow<'a>>) {
        for row in rows {
            if self.by_key.contains_key(row.key) {
                continue;
            }
            let stage = row.stage.map(|s| self.stage_index(s));
            let job = self.job_mut(row.key);
            job.label = row.label.to_string();
            job.stage = stage;
            job.phase = row.status.into();
            job.reason = row.reason.to_string();
        }
    }

    /// What attempt `attempt` of `key` has spent so far, and whether its
    /// wrapper recorded its end, from its status sidecar while it runs.
    /// Ignored once it settled.
    pub fn set_live(&mut self, key: &str, attempt: u64, usage: Option<Usage>, exited: bool) {
        if let Some(&i) = self.by_key.get(key) {
            let job = &mut self.jobs[i];
            if job.attempt == attempt && matches!(job.phase, Phase::Running | Phase::Exited) {
                job.live = usage;
                job.phase = if exited {
                    Phase::Exited
                } else {
                    Phase::Running
                };
            }
        }
    }

    /// Counts by phase, and what each stage and the run spent (settled
    /// attempts as `okstra status` adds them, plus running ones so far).
    pub fn totals(&mut self) -> Totals {
        self.sort();
        let mut t = Totals::default();
        for job in self.listed() {
            *t.phases.entry(job.phase).or_default() += 1;
            let stage = job.stage.map_or("-", |s| self.stages[s].as_str());
            let at = match t.stages.iter().position(|s| s.name == stage) {
                Some(at) => at,
                None => {
                    t.stages.push(Sum {
                        name: stage.to_string(),
                        ..Sum::default()
                    });
                    t.stages.len() - 1
                }
            };
            let spent = job.spent();
            t.stages[at].add(job, spent.as_ref());
            t.run.add(job, spent.as_ref());
        }
        t
    }
}

/// A `workers[]` row of team-state, as [`Model::adopt_workers`] reads it.
#[derive(Debug, Clone, Copy)]
pub struct WorkerRow<'a> {
    pub key: &'a str,
    pub label: &'a str,
    pub stage: Option<&'a str>,
    pub status: WorkerStatus,
    pub reason: &'a str,
}

/// Counts and spending of the watched run.
#[derive(Debug, Default, PartialEq)]
pub struct Totals {
    pub phases: BTreeMap<Phase, usize>,
    /// Per stage, in display order.
    pub stages: Vec<Sum>,
    /// The whole run (its name is empty).
    pub run: Sum,
}

/// The jobs of a stage (or of the run): how many, how many completed,
/// and what their attempts spent, where any reported usage.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Sum {
    pub name: String,
    pub jobs: usize,
    pub completed: usize,
    pub spent: Option<UsageTotal>,
}

impl Sum {
    fn add(&mut self, job: &Job, spent: Option<&UsageTotal>) {
        self.jobs += 1;
        self.completed += usize::from(job.phase == Phase::Completed);
        if let Some(u) = spent {
            self.spent.get_or_insert_with(Default::default).merge(u);
        }
    }
}

impl Totals {
    /// `3 jobs: 1 running, 2 completed`, as [`Phase::shown`] names them.
    pub fn counts_text(&self, exec_running: bool) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for (p, n) in &self.phases {
            let name = p.shown(exec_running);
            match counts.iter_mut().find(|(s, _)| *s == name) {
                Some((_, m)) => *m += n,
                None => counts.push((name, *n)),
            }
        }
        let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let n = self.run.jobs;
        let jobs = if n == 1 { "job" } else { "jobs" };
        match parts.is_empty() {
            true => format!("{n} {jobs}"),
            false => format!("{n} {jobs}: {}", parts.join(", ")),
        }
    }

    /// Whether every job has settled.
    pub fn settled(&self) -> bool {
        self.phases.keys().all(|p| !p.is_open())
    }
}

#[cfg(test)]
mod tests;
