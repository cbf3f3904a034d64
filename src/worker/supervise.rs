//! The wrapper's watch over its running child: the sidecar's heartbeat,
//! the stop flag (SIGTERM / SIGINT to the wrapper), the CLI's output (a
//! served model the catalog refuses, a retry of refused credentials, its
//! usage so far against the attempt's budget) and the wall-clock deadline,
//! until the child ends or is stopped.

use super::output::OutputWatch;
use super::status::StatusFile;
use crate::budget::{Budget, Crossing, Spend};
use crate::process::Spawned;
use crate::provider::Usage;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the wrapper looks at the clock and its signals while the child
/// runs (the child's exit wakes it at once).
const POLL: Duration = Duration::from_millis(50);

/// How soon after the last write the sidecar is written again for usage
/// that grew: often enough for `okstra watch` and a run budget, not once
/// per streamed event.
const USAGE_EVERY: Duration = Duration::from_millis(500);

/// The sidecar's heartbeat, refreshed from the supervising loop (which
/// wakes at least every `POLL`) rather than from a thread of its own. It
/// carries the attempt's usage so far (docs/exec.md#budgets): what exec
/// counts against a run budget and `okstra watch` shows.
pub(super) struct Heartbeat<'a> {
    status: &'a mut StatusFile,
    every: Duration,
    last: Instant,
    /// Usage grew since the last write.
    usage_grew: bool,
}

impl<'a> Heartbeat<'a> {
    pub fn new(status: &'a mut StatusFile, every: Duration) -> Self {
        Heartbeat {
            status,
            every,
            last: Instant::now(),
            usage_grew: false,
        }
    }

    /// The attempt's usage so far, written with the next heartbeat, or
    /// sooner: [`USAGE_EVERY`] after the last write.
    fn usage(&mut self, usage: Usage) {
        self.status.status.usage = Some(usage);
        self.usage_grew = true;
    }

    fn tick(&mut self) {
        let due = if self.usage_grew {
            self.every.min(USAGE_EVERY)
        } else {
            self.every
        };
        if self.last.elapsed() >= due {
            self.usage_grew = false;
            // A missed heartbeat is said once; the run goes on.
            let _ = self.status.write();
            self.last = Instant::now();
        }
    }
}

/// How the child's run ended.
pub(super) enum Outcome {
    Exited(i32),
    /// Stopped because the CLI reported serving a model other than the one
    /// selected.
    Mismatch,
    /// Stopped at the CLI's first retry of a request the API refused for
    /// its credentials (a retry cannot help); the child's code and the
    /// CLI's words.
    Refused(i32, String),
    /// Stopped because the wrapper was asked to stop; the child's code.
    Stopped(i32),
    /// Stopped at the deadline; the child's code.
    TimedOut(i32),
    /// Stopped because its usage so far crossed its budget; the child's
    /// code, and the crossing.
    OverBudget(i32, Crossing),
    Failed(io::Error),
}

/// What the attempt may not go past: its deadline and its budget.
pub(super) struct Limits {
    pub deadline: Option<Instant>,
    pub budget: Option<Budget>,
}

/// Wait for the child, stopping it on a signal to the wrapper, at what its
/// output says, past its budget, or at the deadline (SIGTERM to its group,
/// `grace`, SIGKILL).
pub(super) fn supervise(
    child: &mut Spawned,
    stop: &AtomicBool,
    limits: &Limits,
    grace: Duration,
    watch: &mut OutputWatch,
    heartbeat: &mut Heartbeat,
) -> Outcome {
    let deadline = limits.deadline;
    loop {
        heartbeat.tick();
        match child.try_wait() {
            Ok(Some(code)) => return Outcome::Exited(code),
            Ok(None) => {}
            Err(err) => return Outcome::Failed(err),
        }
        if stop.load(Ordering::Relaxed) {
            return stopped(child, grace, Outcome::Stopped);
        }
        watch.scan();
        if watch.verdict().is_err() {
            let _ = child.stop_group(grace);
            return Outcome::Mismatch;
        }
        if let Some(said) = watch.refused().map(str::to_string) {
            return stopped(child, grace, |code| Outcome::Refused(code, said));
        }
        if let Some(usage) = watch.live() {
            let crossed = limits
                .budget
                .as_ref()
                .and_then(|b| b.crossed(Spend::from(&usage)));
            heartbeat.usage(usage);
            if let Some(c) = crossed {
                return stopped(child, grace, |code| Outcome::OverBudget(code, c));
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return stopped(child, grace, Outcome::TimedOut);
        }
        // Wakes at once when the child exits (or a signal arrives); a short
        // job is not held up for a whole poll interval.
        if let Err(err) = child.wait_timeout(POLL.min(heartbeat.every)) {
            return Outcome::Failed(err);
        }
    }
}

/// Stop the child's group: `how` it ended, with the code it ended with.
fn stopped(child: &mut Spawned, grace: Duration, how: impl FnOnce(i32) -> Outcome) -> Outcome {
    match child.stop_group(grace) {
        Ok(code) => how(code),
        Err(err) => Outcome::Failed(err),
    }
}
