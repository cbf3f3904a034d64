//! Where an earlier exec left the run (docs/exec.md#crash-safety-and-resume):
//! the events log replayed into each job's history, team-state brought up
//! to it, and each attempt left in flight inspected: ended, still running,
//! or never started.

use super::round::Running;
use super::{Ended, Runner};
use crate::exec::backend::{Dispatch, Found as Seen};
use crate::exec::decide::End;
use crate::exec::event::Dispatched;
use crate::exec::replay;
use crate::exec::settle::Left;
use crate::state::syncer::Ticket;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a later exec finds of an attempt a dead executor left in flight.
pub(super) enum Found {
    Ended(Ended),
    /// Its wrapper still runs: watch it like any other.
    Running(Running),
    /// Recorded but never started: start it again, as the same attempt.
    NeverStarted(u64),
}

impl Runner<'_> {
    /// Read the events log back: each job's history, the rows a dead
    /// executor never wrote, and the records nobody should have written.
    pub(super) fn resume_records(&mut self) {
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
                "{}: {} that okstra did not write ({})",
                self.rec.events_path().display(),
                f.what,
                f.why
            );
            self.forged.entry(f.stage).or_default().push(text);
        }
        self.histories = replayed.histories;
        self.baselines = replayed.baselines;
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

    /// Look at the status sidecar and the process of an attempt a dead
    /// executor dispatched and never settled
    /// (docs/exec.md#crash-safety-and-resume).
    pub(super) fn inspect(&mut self, i: usize, d: Dispatched) -> Found {
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
        let status = crate::worker::StatusSidecar::read(&status_path);
        let alive = alive(self);
        let backend = &mut self.backend;
        let left =
            crate::exec::settle::in_flight(status.as_ref(), alive, || backend.ended(d.handle));
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
}

pub(super) fn status_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}
