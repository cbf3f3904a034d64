//! How an attempt's wrapper is started, watched and stopped (SPEC §5.2).
//! A backend only starts, watches and stops: every state rule lives in the
//! runner, the same for all backends.
//!
//! Every start is *held* (SPEC §5.8): the wrapper exists but waits at its
//! gate, so the runner can record the dispatch, with the pid the backend
//! reports, before anything of the worker runs; [`Backend::release`] lets it
//! go, and [`Backend::abandon`] closes the gate instead, on which the
//! wrapper exits without starting anything.
//!
//! [`Local`] serves `cli-wrapper` (the wrapper as exec's child, in a
//! process group of its own) and `pane` (the wrapper in a window of the
//! terminal multiplexer exec runs in, degraded to `cli-wrapper` where none
//! answers).

pub mod pane;

use super::notices::Notices;
use crate::plan::Job;
use crate::process::{self, Gate, SpawnSpec, StopTarget};
use crate::vocab::Backend;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One attempt to start.
pub struct Launch<'a> {
    pub job: &'a Job,
    /// The wrapper argv, `okstra worker ...` as the plan has it.
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// Added to exec's own environment.
    pub env: &'a [(String, String)],
    pub log: &'a Path,
    pub status: &'a Path,
    /// The execution label, or `<workerId>-worker`, for a pane's title.
    pub title: &'a str,
}

/// A wrapper started and held at its gate.
pub struct Started {
    /// The process exec watches and stops (the leader of its group).
    pub pid: u32,
    /// When it started (clock ticks since boot), to tell it from a later
    /// process with the same pid.
    pub pid_start: Option<u64>,
    /// The argv actually started.
    pub argv: Vec<String>,
}

pub trait Dispatch {
    /// Start the attempt's wrapper held at its gate.
    fn start(&mut self, launch: &Launch) -> io::Result<Started>;
    /// Let a held wrapper run.
    fn release(&mut self, pid: u32) -> io::Result<()>;
    /// Close a held wrapper's gate: it exits without starting anything.
    fn abandon(&mut self, pid: u32);
    /// Watch a wrapper an earlier exec started and is no longer there to
    /// watch; its exit comes through [`Self::exits`] like any other.
    fn adopt(&mut self, pid: u32, pid_start: Option<u64>, status: &Path);
    /// The exits that happened, waiting at most `timeout` for the first.
    fn exits(&mut self, timeout: Duration) -> Vec<(u32, i32)>;
    /// Stop these wrappers and everything they started, together: SIGTERM
    /// to every group at once, one `grace` for all, then SIGKILL; each one's
    /// exit code (SPEC §5.2: stopping N workers takes one grace period).
    fn stop(&mut self, pids: &[u32], grace: Duration) -> Vec<(u32, i32)>;
}

/// The wrapper executable exec starts for each attempt.
///
/// A plan records the wrapper's command line in its wire form,
/// `["okstra", "worker", <arguments>...]` (SPEC §6), whatever runs it; the
/// executable is chosen at launch. `okstra-worker` is the wrapper alone
/// (src/bin/okstra-worker.rs), quicker to start than all of okstra, which
/// matters once per job; `okstra worker` runs the same code, for an okstra
/// installed without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerExe {
    /// The okstra executable, for `okstra worker`.
    okstra: PathBuf,
    /// `okstra-worker`, when there is one to start.
    lean: Option<PathBuf>,
}

impl WorkerExe {
    /// The lean wrapper's file name.
    pub const LEAN: &'static str = "okstra-worker";

    /// `okstra-worker` in the directory of `okstra` (exec's own executable,
    /// `std::env::current_exe()`) when it is an executable file there;
    /// otherwise `okstra` itself, as `okstra worker`.
    pub fn beside(okstra: &Path) -> WorkerExe {
        let lean = okstra.with_file_name(Self::LEAN);
        let usable = std::fs::metadata(&lean).is_ok_and(|m| m.is_file())
            && rustix::fs::access(&lean, rustix::fs::Access::EXEC_OK).is_ok();
        WorkerExe {
            okstra: okstra.to_path_buf(),
            lean: usable.then_some(lean),
        }
    }

    /// `okstra worker` only, never `okstra-worker`.
    pub fn subcommand(okstra: &Path) -> WorkerExe {
        WorkerExe {
            okstra: okstra.to_path_buf(),
            lean: None,
        }
    }

    /// The lean wrapper this starts, if any.
    pub fn lean(&self) -> Option<&Path> {
        self.lean.as_deref()
    }

    /// The argv that starts `planned`, a plan's wrapper command line
    /// (`["okstra", "worker", ...]`), with this executable; any other
    /// `okstra` command line gets okstra's path, and one that does not
    /// start with `okstra` is left as it is.
    pub fn argv(&self, planned: &[String]) -> Vec<String> {
        let (head, rest) = match planned {
            [okstra, worker, rest @ ..] if okstra == "okstra" && worker == "worker" => {
                match &self.lean {
                    Some(lean) => (lean, rest),
                    None => (&self.okstra, &planned[1..]),
                }
            }
            [okstra, rest @ ..] if okstra == "okstra" => (&self.okstra, rest),
            _ => return planned.to_vec(),
        };
        std::iter::once(head.display().to_string())
            .chain(rest.iter().cloned())
            .collect()
    }
}

/// `cli-wrapper` and `pane`, on this machine.
pub struct Local {
    /// The executable that plays the wrapper.
    worker: WorkerExe,
    notices: Option<Notices>,
    gates: HashMap<u32, Gate>,
    /// The multiplexer `pane` jobs run in, detected once per exec; `None`
    /// degrades them to `cli-wrapper`.
    pane: Option<pane::Pane>,
    /// Exit notices already taken from their source.
    stash: Vec<(u32, i32)>,
}

impl Local {
    pub fn new(worker: WorkerExe) -> Local {
        Local {
            worker,
            notices: None,
            gates: HashMap::new(),
            pane: None,
            stash: Vec::new(),
        }
    }

    /// Look for a multiplexer, once per exec; what to tell the user.
    pub fn detect_pane(&mut self) -> String {
        self.pane = pane::detect();
        match &self.pane {
            Some(p) => format!("pane jobs run in {} windows", p.name()),
            None => "no terminal multiplexer answered: pane jobs run as cli-wrapper (degradedFrom: pane)".into(),
        }
    }

    /// How `job` is really dispatched: its backend, or `cli-wrapper`
    /// degraded from `pane` when no multiplexer answered.
    pub fn mode_of(&self, job: &Job) -> (Backend, Option<Backend>) {
        match (job.backend, &self.pane) {
            (Backend::Pane, Some(_)) => (Backend::Pane, None),
            (Backend::Pane, None) => (Backend::CliWrapper, Some(Backend::Pane)),
            (other, _) => (other, None),
        }
    }

    fn notices(&mut self) -> io::Result<&mut Notices> {
        if self.notices.is_none() {
            self.notices = Some(Notices::new()?);
        }
        Ok(self.notices.as_mut().expect("set above"))
    }
}

impl Dispatch for Local {
    fn start(&mut self, launch: &Launch) -> io::Result<Started> {
        let argv = self.worker.argv(launch.argv);
        let pane = match (&self.pane, self.mode_of(launch.job).0) {
            (Some(p), Backend::Pane) => Some(p.clone()),
            _ => None,
        };
        let (pid, gate) = match pane {
            Some(pane) => {
                let sender = self.notices()?.sender();
                pane::launch(
                    &pane,
                    &pane::PaneLaunch {
                        argv: &argv,
                        cwd: launch.cwd,
                        env: launch.env,
                        log: launch.log,
                        status: launch.status,
                        title: launch.title,
                    },
                    &sender,
                )?
            }
            None => {
                let (child, gate) = process::spawn_gated(&SpawnSpec {
                    argv: &argv,
                    cwd: launch.cwd,
                    env: launch.env,
                    log: Some(launch.log),
                    stdin: None,
                    pre_exec: None,
                })?;
                let pid = child.pid();
                self.notices()?.watch(child);
                (pid, gate)
            }
        };
        self.gates.insert(pid, gate);
        Ok(Started {
            pid,
            pid_start: process::start_time(pid),
            argv,
        })
    }

    fn release(&mut self, pid: u32) -> io::Result<()> {
        // The gate stays open until the attempt ends: a pane's gate is a
        // FIFO, whose byte would be lost if every end closed before the
        // pane's shell opened it.
        match self.gates.get_mut(&pid) {
            Some(gate) => gate.release(),
            None => Ok(()),
        }
    }

    fn abandon(&mut self, pid: u32) {
        self.gates.remove(&pid);
    }

    fn adopt(&mut self, pid: u32, pid_start: Option<u64>, status: &Path) {
        let Ok(notices) = self.notices() else { return };
        let sender = notices.sender();
        let status: PathBuf = status.to_path_buf();
        std::thread::spawn(move || {
            let code = pane::watch_foreign(pid, pid_start, &status);
            sender.send(pid, code);
        });
    }

    fn exits(&mut self, timeout: Duration) -> Vec<(u32, i32)> {
        let mut out = std::mem::take(&mut self.stash);
        if let Ok(notices) = self.notices() {
            if let Some(first) = notices.next(if out.is_empty() {
                timeout
            } else {
                Duration::ZERO
            }) {
                out.push(first);
                while let Some(more) = notices.next(Duration::ZERO) {
                    out.push(more);
                }
            }
        }
        for (pid, _) in &out {
            self.gates.remove(pid);
        }
        out
    }

    fn stop(&mut self, pids: &[u32], grace: Duration) -> Vec<(u32, i32)> {
        // Groups are looked up before their leaders can exit and be reaped.
        let targets: Vec<StopTarget> = pids.iter().map(|&p| StopTarget::group_of(p)).collect();
        let codes = match self.notices() {
            Ok(notices) => process::stop_all(&targets, grace, notices),
            Err(_) => process::stop_all(&targets, grace, &mut process::NotOurChildren),
        };
        pids.iter()
            .zip(codes)
            .map(|(p, c)| (*p, c.unwrap_or(137)))
            .collect()
    }
}
