//! Stopping processes, many at once (docs/exec.md#running-a-stage): SIGTERM to
//! every target, one shared grace period, SIGKILL to what is left, then reap.
//! Stopping N workers takes one grace period, not N.
//!
//! exec (its workers, on Ctrl-C, a failed launch or idleness), the wrapper
//! (its child) and the pane backend (a pane's stragglers) all stop through
//! [`stop_all`]; what differs is only who can tell that a process ended, a
//! [`Reaper`]: the children's pidfds, exec's exit notices, or, for processes
//! that are not ours to reap, the process table.

use super::{group_alive_any, pid_alive, pid_of};
use rustix::process::Signal;
use std::io;
use std::thread;
use std::time::{Duration, Instant};

/// How often a stop looks again at groups whose waited-for process ended
/// but which still have members, and at processes that are not our children.
const STOP_POLL: Duration = Duration::from_millis(20);

/// How long a stop waits, after SIGKILL, for the killed to be gone: they go
/// at once unless stuck in the kernel, and a caller must not hang on that.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// What [`stop_all`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopTarget {
    /// Every process of group `pgid`; `pid` (the group's leader, or the
    /// member the caller started) is the one waited for.
    Group { pid: u32, pgid: u32 },
    /// The process `pid` alone: a child in the caller's own process group,
    /// whose group must not be signalled.
    Process { pid: u32 },
}

impl StopTarget {
    /// The group `pid` leads or belongs to, or `pid` alone when it is in the
    /// caller's own group (which is never signalled). Look it up while `pid`
    /// is alive and not reaped: a gone process has no group to look up, and
    /// is taken to have led its own.
    pub fn group_of(pid: u32) -> StopTarget {
        let pgid = pid_of(pid).and_then(|p| rustix::process::getpgid(Some(p)).ok());
        let ours = rustix::process::getpgrp();
        match pgid {
            Some(pgid) if pgid == ours => StopTarget::Process { pid },
            Some(pgid) => StopTarget::Group {
                pid,
                pgid: pgid.as_raw_pid() as u32,
            },
            None => StopTarget::Group { pid, pgid: pid },
        }
    }

    /// The process waited for.
    pub fn pid(&self) -> u32 {
        match *self {
            StopTarget::Group { pid, .. } | StopTarget::Process { pid } => pid,
        }
    }

    /// Send `signal`; a target already gone is fine.
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        let sent = match *self {
            StopTarget::Group { pgid, .. } => match pid_of(pgid) {
                // Never group 1 (kill(-1) would reach every process we may signal).
                Some(p) if pgid > 1 => rustix::process::kill_process_group(p, signal),
                _ => return Ok(()),
            },
            StopTarget::Process { pid } => match pid_of(pid) {
                Some(p) => rustix::process::kill_process(p, signal),
                None => return Ok(()),
            },
        };
        match sent {
            Err(rustix::io::Errno::SRCH) => Ok(()),
            other => other.map_err(io::Error::from),
        }
    }
}

/// Tells [`stop_all`] when the processes it stops have ended.
pub trait Reaper {
    /// Wait at most `timeout` for any of `pids` to end, returning as soon as
    /// one did (or early, when a signal arrives): each of `pids` that ended,
    /// with its exit code where it is known (our children, reaped here).
    fn reap(&mut self, pids: &[u32], timeout: Duration) -> Vec<(u32, Option<i32>)>;
}

/// Processes that are not our children (a pane's, started by the terminal
/// multiplexer): one has ended when the process table no longer holds it
/// alive. Their exit codes are not ours to know.
pub struct NotOurChildren;

impl Reaper for NotOurChildren {
    fn reap(&mut self, pids: &[u32], timeout: Duration) -> Vec<(u32, Option<i32>)> {
        let deadline = Instant::now() + timeout;
        loop {
            let gone: Vec<(u32, Option<i32>)> = pids
                .iter()
                .filter(|&&pid| !pid_alive(pid))
                .map(|&pid| (pid, None))
                .collect();
            let left = deadline.saturating_duration_since(Instant::now());
            if !gone.is_empty() || left.is_zero() {
                return gone;
            }
            thread::sleep(left.min(STOP_POLL));
        }
    }
}

/// Stop every target at once: SIGTERM to all of them, one shared `grace`
/// for each to end (its process and, for a group, every member), SIGKILL to
/// whatever is left, then wait (at most a few seconds) for the killed to be
/// gone. Returns each target's exit code, in the order given: `None` where
/// it is not known (not our child, or not gone even after SIGKILL).
///
/// The targets' processes must not have been reaped yet: a reaped pid may
/// belong to someone else by now.
pub fn stop_all(
    targets: &[StopTarget],
    grace: Duration,
    reaper: &mut (impl Reaper + ?Sized),
) -> Vec<Option<i32>> {
    let mut stop = Stop {
        targets,
        ended: vec![false; targets.len()],
        codes: vec![None; targets.len()],
    };
    if targets.is_empty() {
        return stop.codes;
    }
    for target in targets {
        let _ = target.signal(Signal::TERM);
    }
    if !stop.wait(Instant::now() + grace, reaper) {
        for (i, target) in targets.iter().enumerate() {
            // A lone process that ended was reaped: its pid is not ours to
            // signal any more. A group may outlive its leader.
            if !stop.ended[i] || matches!(target, StopTarget::Group { .. }) {
                let _ = target.signal(Signal::KILL);
            }
        }
        stop.wait(Instant::now() + KILL_WAIT, reaper);
    }
    stop.codes
}

/// The progress of one [`stop_all`].
struct Stop<'a> {
    targets: &'a [StopTarget],
    /// Whether each target's waited-for process ended.
    ended: Vec<bool>,
    codes: Vec<Option<i32>>,
}

impl Stop<'_> {
    /// Wait until every target's process ended and every target group is
    /// empty, or until `deadline`; whether everything ended.
    fn wait(&mut self, deadline: Instant, reaper: &mut (impl Reaper + ?Sized)) -> bool {
        loop {
            let pending: Vec<u32> = self
                .targets
                .iter()
                .zip(&self.ended)
                .filter(|(_, &ended)| !ended)
                .map(|(t, _)| t.pid())
                .collect();
            let left = deadline.saturating_duration_since(Instant::now());
            if pending.is_empty() {
                // Only group members the waited-for process left behind
                // remain, if any: nobody tells when they end, so look.
                if !self.groups_alive() {
                    return true;
                }
                if left.is_zero() {
                    return false;
                }
                thread::sleep(left.min(STOP_POLL));
                continue;
            }
            if left.is_zero() {
                return false;
            }
            for (pid, code) in reaper.reap(&pending, left) {
                for (i, target) in self.targets.iter().enumerate() {
                    if target.pid() == pid && !self.ended[i] {
                        self.ended[i] = true;
                        self.codes[i] = code;
                    }
                }
            }
        }
    }

    /// Whether any target group still has a live member.
    fn groups_alive(&self) -> bool {
        let groups: Vec<u32> = self
            .targets
            .iter()
            .filter_map(|t| match *t {
                StopTarget::Group { pgid, .. } => Some(pgid),
                StopTarget::Process { .. } => None,
            })
            .collect();
        group_alive_any(&groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{spawn, spawn_in_caller_group, SpawnSpec, Spawned};
    use std::path::Path;

    fn start(script: &str, cwd: &Path) -> Spawned {
        let argv: Vec<String> = ["sh", "-c", script].iter().map(|s| s.to_string()).collect();
        spawn(&SpawnSpec {
            argv: &argv,
            cwd,
            env: &[],
            log: None,
            stdin: None,
        })
        .unwrap()
    }

    fn wait_for_file(path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !path.exists() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(path.exists(), "{} never appeared", path.display());
    }

    #[test]
    fn stopping_many_that_ignore_sigterm_takes_one_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        const N: usize = 4;
        let grace = Duration::from_secs(1);
        let mut children: Vec<Spawned> = (0..N)
            .map(|i| {
                // `sleep` inherits the ignored SIGTERM: only SIGKILL ends it.
                start(
                    &format!("trap '' TERM; touch ready{i}; sleep 100"),
                    dir.path(),
                )
            })
            .collect();
        for i in 0..N {
            wait_for_file(&dir.path().join(format!("ready{i}")));
        }
        let targets: Vec<StopTarget> = children.iter().map(Spawned::stop_target).collect();
        let started = Instant::now();
        let codes = stop_all(&targets, grace, children.as_mut_slice());
        let took = started.elapsed();
        assert_eq!(codes, vec![Some(128 + Signal::KILL.as_raw()); N]);
        assert!(took >= grace, "{took:?}");
        // One by one this would take N grace periods.
        assert!(took < grace * 2, "{took:?} for {N} at a grace of {grace:?}");
        for t in &targets {
            if let StopTarget::Group { pgid, .. } = t {
                assert!(!group_alive_any(&[*pgid]));
            }
        }
    }

    #[test]
    fn those_that_end_on_sigterm_end_the_stop_early() {
        let dir = tempfile::tempdir().unwrap();
        let mut children = vec![
            start("touch a; sleep 100", dir.path()),
            start(
                "trap 'exit 9' TERM; touch b; while :; do sleep 0.05; done",
                dir.path(),
            ),
        ];
        wait_for_file(&dir.path().join("a"));
        wait_for_file(&dir.path().join("b"));
        let targets: Vec<StopTarget> = children.iter().map(Spawned::stop_target).collect();
        let started = Instant::now();
        let codes = stop_all(&targets, Duration::from_secs(30), children.as_mut_slice());
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(codes, [Some(128 + Signal::TERM.as_raw()), Some(9)]);
    }

    #[test]
    fn a_caller_group_child_is_signalled_alone() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = ["sleep", "30"].iter().map(|s| s.to_string()).collect();
        let mut child = spawn_in_caller_group(&SpawnSpec {
            argv: &argv,
            cwd: dir.path(),
            env: &[],
            log: None,
            stdin: None,
        })
        .unwrap();
        assert_eq!(
            StopTarget::group_of(child.pid()),
            StopTarget::Process { pid: child.pid() }
        );
        let codes = stop_all(
            &[child.stop_target()],
            Duration::from_secs(5),
            std::slice::from_mut(&mut child),
        );
        assert_eq!(codes, [Some(128 + Signal::TERM.as_raw())]);
    }

    #[test]
    fn processes_not_ours_are_stopped_by_their_group() {
        let dir = tempfile::tempdir().unwrap();
        // The shell leads a group and is reaped by a thread of its own, as
        // a pane's process is by the multiplexer.
        let mut child = start("trap '' TERM; touch ready; sleep 100", dir.path());
        wait_for_file(&dir.path().join("ready"));
        let pid = child.pid();
        let target = StopTarget::group_of(pid);
        assert_eq!(target, StopTarget::Group { pid, pgid: pid });
        let reaper = thread::spawn(move || child.wait().unwrap());
        let codes = stop_all(&[target], Duration::from_millis(200), &mut NotOurChildren);
        assert_eq!(codes, [None]);
        assert_eq!(reaper.join().unwrap(), 128 + Signal::KILL.as_raw());
        assert!(!group_alive_any(&[pid]));
    }

    #[test]
    fn nothing_to_stop_returns_at_once() {
        let started = Instant::now();
        assert!(stop_all(&[], Duration::from_secs(30), &mut NotOurChildren).is_empty());
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
