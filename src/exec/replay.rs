//! Resume (docs/exec.md#crash-safety-and-resume): what the events log says
//! about each job of a plan.
//!
//! The events log is the executor's write-ahead record; this module folds the
//! events of one plan (by its digest) into each job's history and answers
//! what the next exec must do with it. It reads nothing but the events: the
//! runner then looks at the status sidecars and processes of attempts that
//! were in flight.
//!
//! Each stage's `stage-snapshot-written` record is collected too: what the
//! stage's audit baseline must hold when a later exec reads it back
//! ([`super::baseline`]).
//!
//! It also checks that the records read like something an executor wrote.
//! An executor never dispatches a job of a stage before every job of the
//! stages before it completed, never settles what it did not dispatch, and
//! never goes back to an earlier attempt; it records a stage's baseline
//! once, before the stage's first dispatch, at the path the plan gives it.
//! Lines that break these rules were written by someone else (a worker
//! forging a later stage's result, or a baseline of its own, say) and are
//! not believed: they are reported, and the stage they fall into is judged
//! for them (docs/audit.md#the-mutation-audit).

use super::event::{Dispatched, Event, Settled, StageSnapshot};
use super::jobs::Jobs;
use crate::plan::{Plan, MAX_ATTEMPTS};
use std::collections::HashMap;

/// One attempt of a job as recorded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptRecord {
    pub attempt: u64,
    /// The last dispatch of this attempt (an attempt recorded but never
    /// started is dispatched again under the same number).
    pub dispatched: Option<Dispatched>,
    pub settled: Option<Settled>,
    pub completed: bool,
    pub retry_scheduled: bool,
}

/// What the records say about one job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub attempts: Vec<AttemptRecord>,
    /// Resumable ends settled by this exec, on top of the recorded ones.
    pub resumed_here: u64,
}

/// What the next exec does with a job.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Nothing recorded: start the job's first attempt.
    Fresh,
    /// Done; not run again.
    Completed { attempt: u64 },
    /// Ended for good (no retry left, or not retryable).
    Failed {
        attempt: u64,
        status: crate::state::attempts::AttemptStatus,
        reason: String,
    },
    /// Start this attempt (a scheduled retry, or a new attempt after a
    /// resumable end).
    Start { attempt: u64 },
    /// Dispatched and not settled: look at its status sidecar and process.
    InFlight { dispatched: Box<Dispatched> },
}

impl History {
    fn entry(&mut self, attempt: u64) -> &mut AttemptRecord {
        match self.attempts.iter().position(|a| a.attempt == attempt) {
            Some(i) => &mut self.attempts[i],
            None => {
                self.attempts.push(AttemptRecord {
                    attempt,
                    ..AttemptRecord::default()
                });
                self.attempts.sort_by_key(|a| a.attempt);
                let i = self
                    .attempts
                    .iter()
                    .position(|a| a.attempt == attempt)
                    .unwrap_or_default();
                &mut self.attempts[i]
            }
        }
    }

    /// How many attempts ended resumable: each adds one to the retry limit.
    pub fn resumable_ends(&self) -> u64 {
        self.resumed_here
            + self
                .attempts
                .iter()
                .filter(|a| a.settled.as_ref().is_some_and(|s| s.resumable))
                .count() as u64
    }

    /// Whether some attempt of the job was dispatched.
    pub fn dispatched(&self) -> bool {
        self.attempts.iter().any(|a| a.dispatched.is_some())
    }

    /// An attempt this exec settled resumable.
    pub fn note_resumable(&mut self) {
        self.resumed_here += 1;
    }

    /// The last attempt number the retry rule allows for a job whose first
    /// attempt is `first` (docs/exec.md#retries,
    /// docs/exec.md#crash-safety-and-resume).
    pub fn last_allowed(&self, first: u64) -> u64 {
        first + u64::from(MAX_ATTEMPTS) - 1 + self.resumable_ends()
    }

    pub fn next(&self) -> Next {
        let Some(last) = self.attempts.last() else {
            return Next::Fresh;
        };
        if last.completed {
            return Next::Completed {
                attempt: last.attempt,
            };
        }
        match &last.settled {
            Some(s) if s.resumable || last.retry_scheduled => Next::Start {
                attempt: last.attempt + 1,
            },
            Some(s) => Next::Failed {
                attempt: last.attempt,
                status: s.status,
                reason: s.reason.clone(),
            },
            None => match &last.dispatched {
                Some(d) => Next::InFlight {
                    dispatched: Box::new(d.clone()),
                },
                None => Next::Fresh,
            },
        }
    }
}

/// A record that no executor would have written.
#[derive(Debug, Clone, PartialEq)]
pub struct Forged {
    /// Where it lies in the log (1-based line among this plan's events).
    pub index: usize,
    /// The stage that was being worked on when it was written: the stage
    /// whose jobs are judged for it.
    pub stage: usize,
    /// Which record: `a record of <key> attempt <n>`, or of a stage's
    /// snapshot.
    pub what: String,
    pub why: String,
}

/// Why a record is not believed: no executor writes it. Stages and
/// attempts are numbered from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotBelieved {
    #[error("a record of stage {stage} while stage {earlier} had not completed")]
    Early { stage: usize, earlier: usize },
    #[error("attempt {attempt} recorded after attempt {latest}")]
    GoingBack { attempt: u64, latest: u64 },
    #[error("attempt {0} dispatched again after it settled")]
    DispatchedAgain(u64),
    #[error("attempt {0} settled but never dispatched")]
    NeverDispatched(u64),
    #[error("a retry of attempt {0} before it settled")]
    RetryUnsettled(u64),
    #[error("the plan has no stage {0}")]
    NoStage(usize),
    #[error("stage {0}'s snapshot recorded again")]
    SnapshotAgain(usize),
    #[error("stage {0}'s snapshot recorded after its first dispatch")]
    SnapshotAfterDispatch(usize),
    #[error("stage {stage}'s snapshot recorded at {at}, not {path}")]
    SnapshotElsewhere {
        stage: usize,
        at: String,
        path: String,
    },
}

/// Each job's history (by its index in plan order), each stage's recorded
/// baseline, and the records that were not believed.
#[derive(Debug, Default)]
pub struct Replay {
    pub histories: Vec<History>,
    /// The `stage-snapshot-written` record of each stage, by its index.
    pub baselines: Vec<Option<StageSnapshot>>,
    pub forged: Vec<Forged>,
}

/// Fold `events` (the whole log, any plan) into the histories of `plan`'s
/// jobs and the baselines of its stages.
pub fn replay(plan: &Plan, jobs: &Jobs, events: impl IntoIterator<Item = Event>) -> Replay {
    let mut fold = Fold::new(plan, jobs);
    let last = plan.stages.len().saturating_sub(1);
    let mut n = 0;
    for event in events {
        if event.plan_digest() != plan.digest {
            continue;
        }
        n += 1;
        let (what, stage, believed) = match event {
            Event::StageSnapshotWritten(s) => {
                let what = format!("a record of stage {}'s snapshot", s.stage_number);
                let stage = s.stage_number.saturating_sub(1).min(last);
                (what, stage, fold.baseline(plan, s))
            }
            event => {
                let Some(head) = event.head() else {
                    continue;
                };
                let (key, attempt) = (head.worker_key.clone(), head.attempt);
                let Some(i) = fold.job_of(&key) else {
                    continue;
                };
                let believed = fold
                    .in_order(i, attempt)
                    .and_then(|()| fold.record(i, event));
                let what = format!("a record of {key} attempt {attempt}");
                (what, fold.stage_of[i], believed)
            }
        };
        if let Err(why) = believed {
            fold.replay.forged.push(Forged {
                index: n,
                // The stage being worked on: the first one not complete yet.
                stage: fold.first_incomplete(plan.stages.len()).unwrap_or(stage),
                what,
                why: why.to_string(),
            });
        }
    }
    fold.replay
}

/// A replay under way: the histories so far, and how far each stage got.
struct Fold<'j> {
    /// The jobs of each state key, in plan order. A state key is unique
    /// within a stage; across stages the same key may appear again, so
    /// events are matched to the stage being worked on.
    index_of: HashMap<&'j str, Vec<usize>>,
    /// Each job's stage.
    stage_of: Vec<usize>,
    /// How many jobs each stage has.
    stage_sizes: Vec<usize>,
    /// How many jobs of each stage have completed, in log order.
    completed_in: Vec<usize>,
    /// The jobs counted in `completed_in`.
    counted: Vec<bool>,
    replay: Replay,
}

impl<'j> Fold<'j> {
    /// Nothing folded yet: every job without a history.
    fn new(plan: &Plan, jobs: &'j Jobs) -> Self {
        let mut index_of: HashMap<&str, Vec<usize>> = HashMap::new();
        for i in 0..jobs.len() {
            index_of.entry(jobs.key(i)).or_default().push(i);
        }
        let stage_of: Vec<usize> = (0..jobs.len()).map(|i| jobs.stage_of(i)).collect();
        let mut stage_sizes: Vec<usize> = vec![0; plan.stages.len()];
        for &s in &stage_of {
            stage_sizes[s] += 1;
        }
        Fold {
            index_of,
            stage_of,
            stage_sizes,
            completed_in: vec![0; plan.stages.len()],
            counted: vec![false; jobs.len()],
            replay: Replay {
                histories: vec![History::default(); jobs.len()],
                baselines: vec![None; plan.stages.len()],
                forged: Vec::new(),
            },
        }
    }

    /// The job a record of state key `key` is about: the job of that key in
    /// the earliest stage not yet complete.
    fn job_of(&self, key: &str) -> Option<usize> {
        let candidates = self.index_of.get(key)?;
        candidates
            .iter()
            .find(|&&i| !self.counted[i])
            .or_else(|| candidates.last())
            .copied()
    }

    /// The first of the stages before `end` that has not completed.
    fn first_incomplete(&self, end: usize) -> Option<usize> {
        (0..end).find(|&s| self.completed_in[s] < self.stage_sizes[s])
    }

    /// Whether an executor could have written a record of job `i`'s
    /// `attempt` now: not while an earlier stage is incomplete, and not for
    /// an attempt before the latest recorded. `Err` says why not.
    fn in_order(&self, i: usize, attempt: u64) -> Result<(), NotBelieved> {
        self.open(self.stage_of[i])?;
        let latest = self.replay.histories[i]
            .attempts
            .last()
            .map(|a| a.attempt)
            .unwrap_or(0);
        if attempt < latest {
            return Err(NotBelieved::GoingBack { attempt, latest });
        }
        Ok(())
    }

    /// Whether an executor could be working on `stage` now: not while an
    /// earlier stage is incomplete. `Err` says why not.
    fn open(&self, stage: usize) -> Result<(), NotBelieved> {
        match self.first_incomplete(stage) {
            Some(earlier) => Err(NotBelieved::Early {
                stage: stage + 1,
                earlier: earlier + 1,
            }),
            None => Ok(()),
        }
    }

    /// Keep `s` as its stage's recorded baseline, unless an executor could
    /// not have written it: exec records a stage's baseline once, at the
    /// path the plan gives it, once every earlier stage completed and before
    /// the stage's first dispatch. `Err` says why not.
    fn baseline(&mut self, plan: &Plan, s: StageSnapshot) -> Result<(), NotBelieved> {
        let stage = s.stage_number;
        let Some(si) = stage.checked_sub(1).filter(|&si| si < plan.stages.len()) else {
            return Err(NotBelieved::NoStage(stage));
        };
        self.open(si)?;
        if self.replay.baselines[si].is_some() {
            return Err(NotBelieved::SnapshotAgain(stage));
        }
        let histories = &self.replay.histories;
        if (0..histories.len()).any(|i| self.stage_of[i] == si && histories[i].dispatched()) {
            return Err(NotBelieved::SnapshotAfterDispatch(stage));
        }
        let path = super::baseline::path_of(plan, si);
        if s.path != path {
            return Err(NotBelieved::SnapshotElsewhere {
                stage,
                at: s.path,
                path,
            });
        }
        self.replay.baselines[si] = Some(s);
        Ok(())
    }

    /// Add `event` to its attempt of job `i`, unless it contradicts what is
    /// recorded of that attempt: a dispatch after it settled, a settling
    /// without a dispatch, a retry before it settled. `Err` says which.
    fn record(&mut self, i: usize, event: Event) -> Result<(), NotBelieved> {
        let Some(attempt) = event.head().map(|h| h.attempt) else {
            return Ok(());
        };
        let record = self.replay.histories[i].entry(attempt);
        match event {
            Event::WorkerDispatched(d) => {
                if record.settled.is_some() || record.completed {
                    return Err(NotBelieved::DispatchedAgain(d.head.attempt));
                }
                record.dispatched = Some(d);
            }
            Event::WorkerResultCollected(s) | Event::WorkerFailed(s)
                if record.dispatched.is_none() =>
            {
                return Err(NotBelieved::NeverDispatched(s.head.attempt));
            }
            Event::WorkerResultCollected(s) => {
                record.completed = true;
                record.settled = Some(s);
                if !self.counted[i] {
                    self.counted[i] = true;
                    self.completed_in[self.stage_of[i]] += 1;
                }
            }
            Event::WorkerFailed(s) => record.settled = Some(s),
            Event::EgressRefused(_) | Event::StageSnapshotWritten(_) => {}
            Event::WorkerRetryScheduled(r) => {
                if record.settled.is_none() {
                    return Err(NotBelieved::RetryUnsettled(r.head.attempt));
                }
                record.retry_scheduled = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::event::{Head, RetryScheduled};
    use super::*;

    fn plan(stages: &[&[&str]]) -> Plan {
        let job = |key: &str| -> crate::plan::Job {
            serde_json::from_value(serde_json::json!({
                "key": key, "identity": {"version": "1", "workerId": key}, "provider": "command",
                "backend": "cli-wrapper", "role": "analyst", "dispatchKind": "initial", "round": 1,
                "promptPath": format!("{key}.md"), "resultPath": "r.md", "workerResultPath": "r.md",
                "completionPaths": ["r.md"], "command": [], "providerCommand": [], "takesSessionId": false,
                "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
                "writePolicy": {"role": "analyst", "allow": [], "digest": ""},
                "writeEnforcement": {"mutationAudit": "none"}
            }))
            .unwrap()
        };
        serde_json::from_value(serde_json::json!({
            "formatVersion": crate::plan::FORMAT_VERSION, "okstraVersion": "0", "createdAt": "t",
            "projectRoot": "/", "run": {"taskKey": "k", "manifestPath": "m", "teamStatePath": "t",
                "leadEventsPath": "e", "errorLogPath": "x", "terminalBackend": "cli-wrapper", "mode": "spec"},
            "inputs": [], "policy": {"maxAttempts": 2},
            "stages": stages.iter().enumerate().map(|(i, keys)| serde_json::json!({
                "name": format!("s{i}"),
                "jobs": keys.iter().map(|k| serde_json::to_value(job(k)).unwrap()).collect::<Vec<_>>()
            })).collect::<Vec<_>>(),
            "digest": "sha256:plan"
        }))
        .unwrap()
    }

    fn head(key: &str, attempt: u64) -> Head {
        Head::sample(key, attempt)
    }

    fn dispatched(key: &str, attempt: u64) -> Event {
        Event::WorkerDispatched(Dispatched::sample(key, attempt, 7))
    }

    fn settled(key: &str, attempt: u64, status: &str, resumable: bool) -> Settled {
        Settled {
            head: head(key, attempt),
            status: serde_json::from_value(serde_json::json!(status)).unwrap(),
            reason: format!("{status} reason"),
            exit_code: Some(0),
            wrapper_exit_code: Some(0),
            missing_completion_paths: vec![],
            served_model: None,
            cli_session_id: None,
            failure_kind: None,
            cli_argv: vec![],
            usage: None,
            confinement: None,
            network: None,
            egress: Vec::new(),
            provider_state: None,
            resumable,
            mutation_audit: None,
            error_log_append: None,
            worktree: None,
        }
    }

    fn done(key: &str, attempt: u64) -> Event {
        Event::WorkerResultCollected(settled(key, attempt, "completed", false))
    }

    fn failed(key: &str, attempt: u64, resumable: bool) -> Event {
        Event::WorkerFailed(settled(key, attempt, "error", resumable))
    }

    fn retry(key: &str, attempt: u64) -> Event {
        Event::WorkerRetryScheduled(RetryScheduled {
            head: head(key, attempt),
            missing_completion_paths: vec![],
            reason: "missing".into(),
            next_attempt: attempt + 1,
        })
    }

    /// Replay `events` over `plan` as exec does: its jobs in a table.
    fn replay(plan: &Plan, events: impl IntoIterator<Item = Event>) -> Replay {
        let mut plan = plan.clone();
        let jobs = Jobs::take(&mut plan);
        super::replay(&plan, &jobs, events)
    }

    fn nexts(r: &Replay) -> Vec<Next> {
        r.histories.iter().map(History::next).collect()
    }

    #[test]
    fn each_kind_of_history_and_what_follows() {
        let p = plan(&[&["a", "b", "c", "d", "e", "f"]]);
        let r = replay(
            &p,
            [
                dispatched("a", 1),
                done("a", 1),
                dispatched("b", 1),
                failed("b", 1, false),
                dispatched("c", 1),
                failed("c", 1, false),
                retry("c", 1),
                dispatched("d", 1),
                failed("d", 1, true),
                dispatched("e", 1),
            ],
        );
        assert!(r.forged.is_empty(), "{:?}", r.forged);
        let n = nexts(&r);
        assert_eq!(n[0], Next::Completed { attempt: 1 });
        assert!(
            matches!(&n[1], Next::Failed { attempt: 1, status, .. } if status.as_str() == "error")
        );
        assert_eq!(n[2], Next::Start { attempt: 2 });
        assert_eq!(n[3], Next::Start { attempt: 2 });
        assert!(matches!(&n[4], Next::InFlight { dispatched } if dispatched.head.attempt == 1));
        assert_eq!(n[5], Next::Fresh);
        // A resumable end does not use up a retry.
        assert_eq!(r.histories[3].last_allowed(1), 3);
        assert_eq!(r.histories[2].last_allowed(1), 2);
    }

    #[test]
    fn an_attempt_dispatched_twice_keeps_its_last_dispatch() {
        let p = plan(&[&["a"]]);
        let mut again = dispatched("a", 1);
        if let Event::WorkerDispatched(d) = &mut again {
            d.handle = super::super::event::Handle::Pid { pid: 99 };
        }
        let r = replay(&p, [dispatched("a", 1), again]);
        match &nexts(&r)[0] {
            Next::InFlight { dispatched } => {
                assert_eq!(dispatched.handle.pid(), Some(99))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_plans_are_passed_over() {
        let p = plan(&[&["a"]]);
        let mut other = done("a", 1);
        if let Event::WorkerResultCollected(s) = &mut other {
            s.head.plan_digest = "sha256:other".into();
        }
        let r = replay(&p, [other]);
        assert_eq!(nexts(&r), [Next::Fresh]);
    }

    #[test]
    fn a_later_stages_result_written_before_its_time_is_not_believed() {
        // A worker of stage 1 appends a completed verifier of stage 2, then
        // kills exec: the verifier must not count as completed.
        let p = plan(&[&["impl"], &["ver"]]);
        let r = replay(
            &p,
            [dispatched("impl", 1), dispatched("ver", 1), done("ver", 1)],
        );
        assert_eq!(r.forged.len(), 2, "{:?}", r.forged);
        assert!(r.forged[0].why.contains("stage 2 while stage 1"));
        let n = nexts(&r);
        assert!(matches!(&n[0], Next::InFlight { .. }));
        assert_eq!(n[1], Next::Fresh);
        // Near miss: the same records after impl completed are believed.
        let r = replay(
            &p,
            [
                dispatched("impl", 1),
                done("impl", 1),
                dispatched("ver", 1),
                done("ver", 1),
            ],
        );
        assert!(r.forged.is_empty());
        assert_eq!(nexts(&r)[1], Next::Completed { attempt: 1 });
    }

    #[test]
    fn settling_what_was_never_dispatched_or_going_back_is_not_believed() {
        let p = plan(&[&["a"]]);
        let r = replay(&p, [done("a", 1)]);
        assert_eq!(r.forged.len(), 1);
        assert_eq!(nexts(&r), [Next::Fresh]);
        let r = replay(
            &p,
            [
                dispatched("a", 1),
                failed("a", 1, false),
                retry("a", 1),
                dispatched("a", 2),
                done("a", 1),
            ],
        );
        assert_eq!(r.forged.len(), 1);
        assert!(matches!(&nexts(&r)[0], Next::InFlight { .. }));
    }

    fn snapshot(stage_number: usize) -> Event {
        Event::StageSnapshotWritten(StageSnapshot {
            ts: "t".into(),
            plan_digest: "sha256:plan".into(),
            stage: format!("s{}", stage_number.saturating_sub(1)),
            stage_number,
            path: format!("snapshots/plan-stage-{stage_number}.json"),
            sha256: format!("{stage_number:064}"),
        })
    }

    fn sha_of(r: &Replay) -> Vec<Option<&str>> {
        r.baselines
            .iter()
            .map(|b| b.as_ref().map(|b| b.sha256.as_str()))
            .collect()
    }

    #[test]
    fn a_stages_snapshot_record_before_its_first_dispatch_is_kept() {
        let p = plan(&[&["a"], &["b"]]);
        let r = replay(
            &p,
            [
                snapshot(1),
                dispatched("a", 1),
                done("a", 1),
                snapshot(2),
                dispatched("b", 1),
            ],
        );
        assert!(r.forged.is_empty(), "{:?}", r.forged);
        let one = format!("{:064}", 1);
        let two = format!("{:064}", 2);
        assert_eq!(sha_of(&r), [Some(one.as_str()), Some(two.as_str())]);
        assert!(r.histories[0].dispatched() && r.histories[1].dispatched());
        // Near miss: a record of another plan is passed over.
        let mut other = snapshot(1);
        if let Event::StageSnapshotWritten(s) = &mut other {
            s.plan_digest = "sha256:other".into();
        }
        let r = replay(&p, [other]);
        assert!(r.forged.is_empty());
        assert_eq!(sha_of(&r), [None, None]);
    }

    #[test]
    fn a_snapshot_record_no_executor_would_write_is_not_believed() {
        // A worker of stage 1 records a baseline of its own making: after
        // the stage's first dispatch, or a second one, or ahead of its
        // stage, or elsewhere than the plan keeps it, or of no stage.
        let p = plan(&[&["a"], &["b"]]);
        let one = format!("{:064}", 1);
        let mut again = snapshot(1);
        if let Event::StageSnapshotWritten(s) = &mut again {
            s.sha256 = "f".repeat(64);
        }
        let mut elsewhere = snapshot(2);
        if let Event::StageSnapshotWritten(s) = &mut elsewhere {
            s.path = "run/mine.json".into();
        }
        // One record of `events` is not believed, for `why`; the stages'
        // baselines are then `kept`.
        let one_forged = |events: Vec<Event>, why: &str, kept: [Option<&str>; 2]| {
            let r = replay(&p, events);
            assert_eq!(r.forged.len(), 1, "{why}: {:?}", r.forged);
            assert!(r.forged[0].why.contains(why), "{why}: {:?}", r.forged);
            assert!(r.forged[0].what.contains("snapshot"), "{:?}", r.forged);
            assert_eq!(sha_of(&r), kept, "{why}");
        };
        let kept = [Some(one.as_str()), None];
        one_forged(
            vec![dispatched("a", 1), snapshot(1)],
            "after its first dispatch",
            [None, None],
        );
        one_forged(
            vec![snapshot(1), again, dispatched("a", 1)],
            "recorded again",
            kept,
        );
        one_forged(
            vec![snapshot(1), dispatched("a", 1), snapshot(2)],
            "stage 2 while stage 1",
            kept,
        );
        one_forged(
            vec![snapshot(1), dispatched("a", 1), done("a", 1), elsewhere],
            "not snapshots/plan-stage-2.json",
            kept,
        );
        one_forged(vec![snapshot(3)], "no stage 3", [None, None]);
    }

    #[test]
    fn the_same_key_in_two_stages_is_two_jobs() {
        let p = plan(&[&["a"], &["a"]]);
        let r = replay(&p, [dispatched("a", 1), done("a", 1), dispatched("a", 1)]);
        assert!(r.forged.is_empty(), "{:?}", r.forged);
        let n = nexts(&r);
        assert_eq!(n[0], Next::Completed { attempt: 1 });
        assert!(matches!(&n[1], Next::InFlight { .. }));
    }
}
