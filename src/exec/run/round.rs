//! A round of a stage (docs/exec.md#running-a-stage): attempts queued,
//! waiting at their gates, running. A batch of wrappers starts held at
//! their gates, their dispatches are recorded with one commit, and each is
//! let through once that commit is durable ([`going`]); a freed slot is
//! filled from those waiting, and the queue tops the look-ahead up
//! ([`to_launch`]). The round watches exits, idleness and Ctrl-C, and
//! stops what must stop.

use super::settlement::wrapper_end;
use super::{Ended, Runner, INTERRUPTED_BEFORE_START, STOPPED_BEFORE_START};
use crate::exec::backend::Dispatch;
use crate::exec::decide::End;
use crate::exec::event::{Dispatched, Event, Handle};
use crate::exec::record::Then;
use crate::exec::report::Notice;
use crate::plan::Job;
use crate::state::syncer::Ticket;
use crate::state::WorkerStatus;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long the loop waits for an exit before it looks at idleness, the
/// interrupt flag and the live line again.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// How long a batch starts wrappers before those started so far are
/// recorded (one synced commit) and released. Local starts take about a
/// millisecond, so a local batch of a hundred jobs is one slice; a Slurm
/// start is an `sbatch` call of 10-25 ms, and slicing lets the first jobs
/// run while later ones are still being submitted.
pub(super) const LAUNCH_SLICE: Duration = Duration::from_millis(200);

/// At most how many attempts beyond `--concurrency` a round keeps recorded
/// and waiting at their gates, so that a freed slot is filled at once instead
/// of after a durable commit (see [`Runner::wait_round`]).
pub(super) const READY_AHEAD_MAX: usize = 8;

/// An attempt whose wrapper runs, or waits at its gate, recorded, for a
/// slot (`held`).
pub(super) struct Running {
    pub(super) job: usize,
    pub(super) dispatched: Dispatched,
    /// Recorded and started, but not yet let through its gate: nothing of
    /// the worker runs yet and it takes no slot.
    pub(super) held: bool,
    /// The commit of its dispatch record: it may go once that is durable.
    pub(super) ticket: Ticket,
    pub(super) started: Instant,
    pub(super) watch: crate::process::LogWatch,
}

/// The attempts of one round not yet ended: queued, waiting at their gates
/// (recorded, not yet let through) and running.
pub(super) struct Round {
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

/// What a round asks of the runner to fill its slots: the narrow seam its
/// scheduling is decided through, so the tests below drive it with a
/// stand-in (the runner's own in this file's `impl Gates for Runner`).
pub(super) trait Gates {
    /// Whether the dispatch record committed with `ticket` is durable (one
    /// that cannot be made durable stops the run, and is not).
    fn durable(&mut self, ticket: Ticket) -> bool;
    /// Let a recorded attempt through its gate.
    fn release(&mut self, r: &mut Running);
    /// Whether the run stopped: a record could not be written.
    fn stopped(&self) -> bool;
    /// Whether `attempt` of job `i` may start now (the binding gate); one
    /// that may not is refused, and reported, by the runner.
    fn admit(&mut self, i: usize, attempt: u64) -> bool;
    /// Start `batch` held at their gates, record them with one commit, and
    /// let up to `free` go once durable ([`Runner::launch_batch`]).
    fn launch(&mut self, batch: Vec<(usize, u64)>, free: usize) -> Result<Vec<Running>, Cut>;
}

/// A launch that failed: why, the attempts that never ran, and those
/// started (and recorded) before it failed.
pub(super) type Cut = (String, Vec<(usize, u64)>, Vec<Running>);

impl Round {
    /// Fill the round's free slots: first from the attempts waiting at
    /// their gates, in the order they were recorded, then by a batch from
    /// the queue, which also tops the waiting ones up once fewer than half
    /// are left (so that each commit covers several attempts). A launch
    /// failure: why, and the attempts of the batch that never ran (those
    /// that started are in `running`).
    pub(super) fn fill(
        &mut self,
        gates: &mut impl Gates,
    ) -> Result<(), (String, Vec<(usize, u64)>)> {
        let running = &self.running;
        self.waiting
            .retain(|h| running.get(h).is_some_and(|r| r.held));
        let mut free = self
            .limit
            .saturating_sub(self.running.len() - self.waiting.len());
        let tickets = self.waiting.iter().map(|h| self.running[h].ticket);
        let go = going(tickets, free, |t| gates.durable(t));
        for h in self.waiting.drain(..go) {
            if let Some(r) = self.running.get_mut(&h) {
                gates.release(r);
            }
        }
        free -= go;
        if gates.stopped() {
            return Ok(());
        }
        let want = to_launch(free, self.waiting.len(), self.ahead);
        let mut batch = Vec::new();
        while batch.len() < want {
            let Some((i, attempt)) = self.queue.pop_front() else {
                break;
            };
            if gates.admit(i, attempt) {
                batch.push((i, attempt));
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        let (started, failed) = match gates.launch(batch, free) {
            Ok(started) => (started, None),
            Err((reason, never, started)) => (started, Some((reason, never))),
        };
        for r in started {
            if r.held {
                self.waiting.push_back(r.dispatched.handle);
            }
            self.running.insert(r.dispatched.handle, r);
        }
        failed.map_or(Ok(()), Err)
    }
}

impl Gates for Runner<'_> {
    fn durable(&mut self, ticket: Ticket) -> bool {
        self.may_go(ticket)
    }
    fn release(&mut self, r: &mut Running) {
        Runner::release(self, r)
    }
    fn stopped(&self) -> bool {
        self.fatal.is_some()
    }
    fn admit(&mut self, i: usize, attempt: u64) -> bool {
        match self.binding_gate(i) {
            Some(why) => {
                self.refuse(i, attempt, why);
                false
            }
            None => true,
        }
    }
    fn launch(&mut self, batch: Vec<(usize, u64)>, free: usize) -> Result<Vec<Running>, Cut> {
        self.launch_batch(batch, free)
    }
}

/// How many of the attempts waiting at their gates go now, given each
/// one's `ticket` in the order recorded: at most `free`, first first, and
/// none from the first whose dispatch record is not `durable` yet. No
/// attempt goes before its record is durable
/// (docs/exec.md#crash-safety-and-resume), and none overtakes one recorded
/// before it. `durable` is not asked once no slot is left.
fn going<T: Copy>(
    tickets: impl IntoIterator<Item = T>,
    free: usize,
    mut durable: impl FnMut(T) -> bool,
) -> usize {
    tickets
        .into_iter()
        .take(free)
        .take_while(|&t| durable(t))
        .count()
}

/// How many attempts a round takes from its queue next, with `free`
/// slots, `waiting` attempts at their gates and `ahead` to keep waiting:
/// the free slots and the look-ahead's shortfall; none while no slot is
/// free and at least half the look-ahead still waits (so that each
/// durable commit covers several attempts).
fn to_launch(free: usize, waiting: usize, ahead: usize) -> usize {
    if free > 0 || waiting * 2 < ahead {
        free + ahead.saturating_sub(waiting)
    } else {
        0
    }
}

/// How many attempts a round under `limit` keeps recorded and waiting at
/// their gates: four times its slots, at least 2 and at most
/// [`READY_AHEAD_MAX`]; none without a limit, where every attempt starts
/// at once.
pub(super) fn ahead_of(limit: usize) -> usize {
    if limit == usize::MAX {
        0
    } else {
        limit.saturating_mul(4).clamp(2, READY_AHEAD_MAX)
    }
}

impl Runner<'_> {
    /// Start a batch of attempts (docs/exec.md#crash-safety-and-resume): each
    /// wrapper starts held at its gate; their dispatches are recorded and
    /// synced in one commit; only then may they go. The first `free` are let
    /// through at once; the rest stay at their gates, recorded, until a slot
    /// frees. A batch whose starts take longer than [`LAUNCH_SLICE`] goes in
    /// slices, each recorded (and its share of `free` released) before the next
    /// starts. Returns the started attempts, or the launch failure (every
    /// wrapper of its slice already stopped at its gate) with the attempts that
    /// never ran and those of earlier slices, which were recorded.
    pub(super) fn launch_batch(
        &mut self,
        batch: Vec<(usize, u64)>,
        mut free: usize,
    ) -> Result<Vec<Running>, Cut> {
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
            let tickets: Vec<Ticket> = running
                .iter()
                .filter(|r| r.held)
                .map(|r| r.ticket)
                .collect();
            let go = going(tickets, free, |t| self.may_go(t));
            for r in running.iter_mut().filter(|r| r.held).take(go) {
                self.release(r);
            }
            free -= go;
        }
        Ok(running)
    }

    /// Start the wrappers of the next slice of `todo`, held at their gates,
    /// for at most [`LAUNCH_SLICE`] (at least one); and the launch that
    /// failed, if one did (why, and its attempt, taken from `todo`).
    #[allow(clippy::type_complexity)]
    pub(super) fn start_slice(
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
    pub(super) fn abandon(&mut self, held: &[(usize, Dispatched)]) {
        for (_, d) in held {
            self.backend.abandon(d.handle);
        }
    }

    /// Whether an attempt recorded with `ticket` may go: its record is
    /// durable. A record that cannot be made durable stops the run.
    pub(super) fn may_go(&mut self, ticket: Ticket) -> bool {
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
    pub(super) fn release(&mut self, r: &mut Running) {
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
    pub(super) fn wait_round(
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
            self.mind_budget(&mut round, &mut ended);
            if !self.interrupt.load(Ordering::Relaxed)
                && self.fatal.is_none()
                && self.over_budget.is_none()
            {
                if let Err((reason, never)) = round.fill(self) {
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
            let halted = self.fatal.is_some() || self.over_budget.is_some();
            if round.running.is_empty() && (round.queue.is_empty() || halted) {
                let why = self.budget_reason().unwrap_or(STOPPED_BEFORE_START);
                let why = why.to_string();
                for (i, _) in round.queue {
                    self.not_run(i, &why);
                }
                break;
            }
            self.take_exits(&mut round, &mut ended);
            self.stop_idle(&mut round, &mut ended);
            self.hear_backends();
            if let Err(e) = self.rec.maybe_flush() {
                self.fatal.get_or_insert(e.to_string());
            }
        }
        (ended, retries)
    }

    /// Check the run's spend against its budget
    /// (docs/exec.md#budgets); the first time it is past it, close the
    /// gates of the attempts waiting at them and, with `onBudget = "stop"`,
    /// stop the running ones (one grace period), as ended.
    fn mind_budget(&mut self, round: &mut Round, ended: &mut Vec<Ended>) {
        if self.plan.run.budget.is_none() {
            return;
        }
        let running: Vec<usize> = round
            .running
            .values()
            .filter(|r| !r.held)
            .map(|r| r.job)
            .collect();
        let Some(on_budget) = self.budget_crossed(&running, &Self::unsettled(ended)) else {
            return;
        };
        let why = self.budget_reason().unwrap_or_default().to_string();
        self.let_go_of_waiting(round, &why);
        if on_budget == crate::budget::OnBudget::Stop {
            let running = std::mem::take(&mut round.running);
            ended.extend(self.stop(running.into_values().collect(), End::OverBudget(why)));
        }
    }

    /// Take the exits the backends saw (waiting up to [`TICK`] for one) as
    /// ended attempts of the round.
    pub(super) fn take_exits(&mut self, round: &mut Round, ended: &mut Vec<Ended>) {
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
    pub(super) fn stop_idle(&mut self, round: &mut Round, ended: &mut Vec<Ended>) {
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
            crate::exec::settle::mark_idle_timeout(&self.own, &status);
            ended.push(e);
        }
    }

    /// Close the gates of the attempts waiting at them, which will not be
    /// let through: each wrapper exits there, nothing of its worker having
    /// run. Their dispatches stay recorded and unsettled, so the next exec
    /// starts each as the same attempt (docs/exec.md#crash-safety-and-resume);
    /// this one reports them not run, saying `why`.
    pub(super) fn let_go_of_waiting(&mut self, round: &mut Round, why: &str) {
        for h in round.waiting.drain(..) {
            if let Some(r) = round.running.remove(&h) {
                self.backend.abandon(h);
                self.not_run(r.job, why);
            }
        }
    }

    /// Stop these attempts together (one grace period for all) and hand
    /// them back as ended with `end`.
    pub(super) fn stop(&mut self, running: Vec<Running>, end: End) -> Vec<Ended> {
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
    pub(super) fn cut_round(
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

/// Why the run stops when a batch's dispatch records could not be written
/// or made durable: none of its attempts starts.
pub(super) fn dispatch_unrecorded(why: impl std::fmt::Display) -> String {
    format!("cannot record the dispatch of a batch: {why}")
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

    /// A syncer stand-in: tickets are issued in order, and those up to
    /// `synced` are durable. Each ticket asked is noted.
    struct Synced {
        synced: u64,
        asked: Vec<u64>,
    }

    impl Synced {
        fn durable(&mut self, ticket: u64) -> bool {
            self.asked.push(ticket);
            ticket <= self.synced
        }
    }

    #[test]
    fn no_attempt_goes_before_its_record_is_durable() {
        let mut s = Synced {
            synced: 2,
            asked: vec![],
        };
        // Four wait, recorded by tickets 1, 2, 3, 3; 2 is synced.
        assert_eq!(going([1, 2, 3, 3], 4, |t| s.durable(t)), 2);
        assert_eq!(s.asked, [1, 2, 3], "stops at the first not durable");
        // A later ticket never overtakes an earlier one that is not durable.
        s.synced = 0;
        assert_eq!(going([3, 1], 2, |t| s.durable(t)), 0);
        // Once synced, all go, as far as the free slots reach.
        s.synced = 3;
        assert_eq!(going([3, 3, 3], 2, |t| s.durable(t)), 2);
        assert_eq!(going([3, 3, 3], 9, |t| s.durable(t)), 3);
        // No free slot: the record's state is not even asked (asking may
        // stop the run when the syncer failed).
        s.asked.clear();
        assert_eq!(going([1, 2], 0, |t| s.durable(t)), 0);
        assert!(s.asked.is_empty());
        let nothing: [u64; 0] = [];
        assert_eq!(going(nothing, 4, |t| s.durable(t)), 0);
    }

    #[test]
    fn a_round_launches_for_its_free_slots_and_its_look_ahead() {
        // --concurrency 2: look-ahead 8.
        let ahead = ahead_of(2);
        assert_eq!(to_launch(2, 0, ahead), 10, "both slots, and 8 to wait");
        assert_eq!(
            to_launch(1, 8, ahead),
            1,
            "a slot freed, the look-ahead full"
        );
        assert_eq!(to_launch(0, 4, ahead), 0, "half still wait: no commit yet");
        assert_eq!(to_launch(0, 3, ahead), 5, "fewer than half: topped up");
        assert_eq!(to_launch(0, 12, ahead), 0, "more than the look-ahead");
        // No limit: no look-ahead, every pending attempt at once.
        assert_eq!(
            to_launch(usize::MAX - 5, 0, ahead_of(usize::MAX)),
            usize::MAX - 5
        );
    }

    /// A stand-in for the runner: each launch is one commit (the next
    /// ticket), durable once `synced` reaches it; what it was asked is
    /// noted.
    #[derive(Default)]
    struct Fake {
        synced: u64,
        commits: u64,
        stopped: bool,
        refused_jobs: Vec<usize>,
        launched: Vec<Vec<usize>>,
        released: Vec<usize>,
    }

    fn held(job: usize, ticket: Ticket) -> Running {
        Running {
            job,
            dispatched: Dispatched::sample(&format!("w{job}"), 1, 1000 + job as u32),
            held: true,
            ticket,
            started: Instant::now(),
            watch: crate::process::LogWatch::new(std::path::PathBuf::from("/nonexistent")),
        }
    }

    impl Gates for Fake {
        fn durable(&mut self, ticket: Ticket) -> bool {
            ticket <= Ticket::nth(self.synced)
        }
        fn release(&mut self, r: &mut Running) {
            assert!(r.held, "released twice: {}", r.job);
            r.held = false;
            self.released.push(r.job);
        }
        fn stopped(&self) -> bool {
            self.stopped
        }
        fn admit(&mut self, i: usize, _attempt: u64) -> bool {
            !self.refused_jobs.contains(&i)
        }
        fn launch(&mut self, batch: Vec<(usize, u64)>, free: usize) -> Result<Vec<Running>, Cut> {
            self.commits += 1;
            let ticket = Ticket::nth(self.commits);
            self.launched.push(batch.iter().map(|(i, _)| *i).collect());
            let mut started: Vec<Running> = batch.iter().map(|(i, _)| held(*i, ticket)).collect();
            let go = going(started.iter().map(|r| r.ticket), free, |t| self.durable(t));
            for r in started.iter_mut().take(go) {
                self.release(r);
            }
            Ok(started)
        }
    }

    fn running_now(round: &Round) -> Vec<usize> {
        let mut on: Vec<usize> = round
            .running
            .values()
            .filter(|r| !r.held)
            .map(|r| r.job)
            .collect();
        on.sort();
        on
    }

    #[test]
    fn a_round_lets_no_attempt_go_before_its_record_is_durable() {
        let mut fake = Fake::default();
        let mut round = Round::new(Some(2), (0..20).map(|i| (i, 1)).collect(), vec![]);
        // Two slots and a look-ahead of 8: ten started held, one commit,
        // not yet durable: none runs.
        round.fill(&mut fake).unwrap();
        assert_eq!(fake.launched, [(0..10).collect::<Vec<_>>()]);
        assert!(fake.released.is_empty() && running_now(&round).is_empty());
        assert_eq!(round.waiting.len(), 10);
        // The commit is durable: the first two recorded take the slots, in
        // the order recorded; the rest wait, and the queue is not touched
        // while the look-ahead is full.
        fake.synced = fake.commits;
        round.fill(&mut fake).unwrap();
        assert_eq!(fake.released, [0, 1]);
        assert_eq!(running_now(&round), [0, 1]);
        assert_eq!(round.queue.len(), 10);
        // Slots free one after another: each goes to the next attempt
        // recorded. Once fewer than half the look-ahead wait (after 6 took
        // a slot), five more start with a second commit, not durable yet.
        for done in 0..8 {
            round.running.retain(|_, r| r.job != done);
            round.fill(&mut fake).unwrap();
        }
        assert_eq!(fake.released, (0..10).collect::<Vec<_>>());
        assert_eq!(fake.launched[1], [10, 11, 12, 13, 14]);
        // The next slot frees: the next recorded attempt's commit is not
        // durable, so it stays at its gate, and the slot stays free.
        round.running.retain(|_, r| r.job != 8);
        round.fill(&mut fake).unwrap();
        assert_eq!(fake.released.len(), 10, "{:?}", fake.released);
        assert_eq!(running_now(&round), [9]);
        // Durable now: it goes.
        fake.synced = fake.commits;
        round.fill(&mut fake).unwrap();
        assert_eq!(fake.released.last(), Some(&10));
        assert_eq!(running_now(&round), [9, 10]);
    }

    #[test]
    fn a_stopped_run_launches_nothing_and_a_refused_attempt_is_not_started() {
        let mut fake = Fake {
            refused_jobs: vec![1],
            synced: u64::MAX,
            ..Fake::default()
        };
        let mut round = Round::new(Some(1), (0..3).map(|i| (i, 1)).collect(), vec![]);
        round.fill(&mut fake).unwrap();
        assert_eq!(fake.launched, [vec![0, 2]], "1 refused at its gate");
        assert_eq!(fake.released, [0], "one slot");
        fake.stopped = true;
        round.running.retain(|_, r| r.job != 0);
        let launches = fake.launched.len();
        round.fill(&mut fake).unwrap();
        assert_eq!(fake.launched.len(), launches, "nothing new once stopped");
    }

    #[test]
    fn without_a_limit_every_attempt_starts_in_one_batch() {
        let mut fake = Fake {
            synced: u64::MAX,
            ..Fake::default()
        };
        let mut round = Round::new(None, (0..50).map(|i| (i, 1)).collect(), vec![]);
        round.fill(&mut fake).unwrap();
        assert_eq!(fake.launched.len(), 1);
        assert_eq!(running_now(&round).len(), 50);
        assert!(round.waiting.is_empty() && round.queue.is_empty());
    }
}
