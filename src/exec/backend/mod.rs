//! How an attempt's wrapper is started, watched and stopped
//! (docs/exec.md#running-a-stage, docs/slurm.md#running-on-slurm). A backend
//! only starts, watches and stops: every state rule lives in the runner, the
//! same for all backends.
//!
//! Every start is *held* (docs/exec.md#crash-safety-and-resume): the wrapper
//! exists but waits at its gate, so the runner can record the dispatch, with
//! the [`Handle`] the backend reports, before anything of the worker runs;
//! [`Dispatch::release`] lets it go, and [`Dispatch::abandon`] closes the gate
//! instead, on which the wrapper exits without starting anything.
//!
//! [`Local`] serves `cli-wrapper` (wrapper slots, exec's children, each in
//! a process group of its own and running attempt after attempt: see
//! [`slots`]; a slot is held by not being sent its attempt yet) and `pane`
//! (the wrapper in a window of the terminal multiplexer exec runs in,
//! degraded to `cli-wrapper` where none answers).
//! [`Backends`] routes each attempt to the backend its job names.

pub mod pane;
pub mod slots;
pub mod slurm;

use super::decide::End;
use super::event::{Dispatched, Handle};
use super::notices::Notices;
use crate::plan::Job;
use crate::process::{self, Gate, StopTarget};
use crate::vocab::Backend;
use std::collections::{HashMap, HashSet};
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
    /// The log, opened by exec (no symlink followed at any component).
    pub log_file: &'a std::fs::File,
    pub status: &'a Path,
    /// The execution label, or `<workerId>-worker`, for a pane's title.
    pub title: &'a str,
}

/// A wrapper started and held at its gate.
pub struct Started {
    pub handle: Handle,
    /// When the wrapper's process started (clock ticks since boot), to tell
    /// it from a later process with the same pid.
    pub pid_start: Option<u64>,
    /// The argv actually started.
    pub argv: Vec<String>,
}

/// What a later exec finds of an attempt an earlier one started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The backend still runs it.
    Running,
    /// The backend has nothing of it any more (it ended, or never ran).
    Gone,
}

pub trait Dispatch {
    /// Start the attempt's wrapper held at its gate.
    fn start(&mut self, launch: &Launch) -> io::Result<Started>;
    /// Let a held wrapper run.
    fn release(&mut self, handle: Handle) -> io::Result<()>;
    /// Close a held wrapper's gate: it exits without starting anything.
    fn abandon(&mut self, handle: Handle);
    /// Whether an attempt an earlier exec dispatched still runs.
    fn find(&mut self, dispatched: &Dispatched) -> Found;
    /// Watch a wrapper an earlier exec started and is no longer there to
    /// watch; its exit comes through [`Self::exits`] like any other.
    fn adopt(&mut self, dispatched: &Dispatched, status: &Path);
    /// The exits that happened, waiting at most `timeout` for the first.
    fn exits(&mut self, timeout: Duration) -> Vec<(Handle, i32)>;
    /// Stop these attempts and everything they started, together: SIGTERM
    /// to every one at once, one `grace` for all, then SIGKILL; each one's
    /// exit code (docs/exec.md#running-a-stage: stopping N workers takes one
    /// grace period).
    fn stop(&mut self, handles: &[Handle], grace: Duration) -> Vec<(Handle, i32)>;
    /// How an attempt [`Self::exits`] reported ended, where its exit code
    /// does not say it all (a Slurm job its scheduler cancelled, or stopped
    /// at its time limit); asked once per exit. `None`: the code says it.
    fn ended(&mut self, _handle: Handle) -> Option<End> {
        None
    }
    /// Whether the attempt still waits for the backend to start it (a Slurm
    /// job in the queue): time spent there is not idleness.
    fn queued(&mut self, _handle: Handle) -> bool {
        false
    }
    /// What the backend has to tell a person since it was last asked (a
    /// scheduler's client failing, say): the runner says it through its
    /// reporters.
    fn said(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// The wrapper executable exec starts for each attempt.
///
/// A plan records the wrapper's command line in its wire form,
/// `["okstra", "worker", <arguments>...]`
/// (docs/providers.md#the-worker-wrapper), whatever runs it; the executable is
/// chosen at launch. `okstra-worker` is the wrapper alone
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

    /// The argv that starts a wrapper slot: `okstra-worker --serve`, or
    /// `okstra worker-slot`.
    pub fn slot_argv(&self) -> Vec<String> {
        match &self.lean {
            Some(lean) => vec![lean.display().to_string(), crate::worker::SERVE_FLAG.into()],
            None => vec![self.okstra.display().to_string(), "worker-slot".into()],
        }
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
    gates: HashMap<Handle, Gate>,
    /// The multiplexer `pane` jobs run in, detected once per exec; `None`
    /// degrades them to `cli-wrapper`.
    pane: Option<pane::Pane>,
    /// Exit notices already taken from their source.
    stash: Vec<(Handle, i32)>,
    /// The `cli-wrapper` slots.
    slots: slots::Slots,
    /// Slots stopped by [`Dispatch::stop`], whose late notices are stale.
    stopped: HashSet<u32>,
}

impl Local {
    pub fn new(worker: WorkerExe) -> Local {
        Local {
            worker,
            notices: None,
            gates: HashMap::new(),
            pane: None,
            stash: Vec::new(),
            slots: slots::Slots::default(),
            stopped: HashSet::new(),
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

    /// Wakes [`Dispatch::exits`] from another thread.
    pub fn waker(&mut self) -> io::Result<super::notices::Waker> {
        Ok(self.notices()?.waker())
    }

    fn notices(&mut self) -> io::Result<&mut Notices> {
        made(&mut self.notices)
    }
}

/// The loop's notices, made on first use (a field's borrow, so that the
/// other fields stay free beside it).
fn made(notices: &mut Option<Notices>) -> io::Result<&mut Notices> {
    if notices.is_none() {
        *notices = Some(Notices::new()?);
    }
    Ok(notices.as_mut().expect("set above"))
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
                let args = launch.argv.get(2..).unwrap_or_default();
                let start = slots::SlotStart {
                    argv: &self.worker.slot_argv(),
                    cwd: launch.cwd,
                    env: launch.env,
                    log: launch.log_file,
                };
                let notices = made(&mut self.notices)?;
                let (pid, pid_start) = self.slots.take(&start, args, notices)?;
                return Ok(Started {
                    handle: Handle::Pid { pid },
                    pid_start,
                    argv,
                });
            }
        };
        let handle = Handle::Pid { pid };
        self.gates.insert(handle, gate);
        Ok(Started {
            handle,
            pid_start: process::start_time(pid),
            argv,
        })
    }

    fn release(&mut self, handle: Handle) -> io::Result<()> {
        // The gate stays open until the attempt ends: a pane's gate is a
        // FIFO, whose byte would be lost if every end closed before the
        // pane's shell opened it.
        if let Some(pid) = handle.pid().filter(|p| self.slots.holds(*p)) {
            return self.slots.release(pid, made(&mut self.notices)?);
        }
        match self.gates.get_mut(&handle) {
            Some(gate) => gate.release(),
            None => Ok(()),
        }
    }

    fn abandon(&mut self, handle: Handle) {
        if let Some(pid) = handle.pid() {
            self.slots.abandon(pid);
        }
        self.gates.remove(&handle);
    }

    fn find(&mut self, d: &Dispatched) -> Found {
        match d.handle.pid() {
            Some(pid) if process::same_process_alive(pid, d.pid_start) => Found::Running,
            _ => Found::Gone,
        }
    }

    fn adopt(&mut self, d: &Dispatched, status: &Path) {
        let Some(pid) = d.handle.pid() else { return };
        let Ok(notices) = self.notices() else { return };
        let sender = notices.sender();
        let status: PathBuf = status.to_path_buf();
        let pid_start = d.pid_start;
        let leader = d.head.dispatch_mode == Backend::CliWrapper;
        std::thread::spawn(move || {
            let code = pane::watch_foreign(pid, pid_start, &status);
            if leader {
                // An earlier exec's wrapper led its own group, as ours do.
                process::kill_leftovers(pid);
            }
            sender.send(pid, code);
        });
    }

    fn exits(&mut self, timeout: Duration) -> Vec<(Handle, i32)> {
        let mut out = std::mem::take(&mut self.stash);
        if let Ok(notices) = self.notices() {
            let wait = if out.is_empty() {
                timeout
            } else {
                Duration::ZERO
            };
            if let Some((pid, code)) = notices.next(wait) {
                out.push((Handle::Pid { pid }, code));
                while let Some((pid, code)) = notices.next(Duration::ZERO) {
                    out.push((Handle::Pid { pid }, code));
                }
            }
            let gone = notices.take_gone();
            let stopped = &mut self.stopped;
            // A stopped slot's end, or an answer that came too late for
            // its stop, was settled by the stop.
            out.retain(|(h, _)| h.pid().is_none_or(|p| !stopped.contains(&p)));
            for (pid, code) in gone {
                if self.slots.gone(pid) {
                    // It died at its gate, with a request held for it.
                    out.push((Handle::Pid { pid }, code));
                }
                self.stopped.remove(&pid);
            }
        }
        for (handle, _) in &out {
            if let Some(pid) = handle.pid().filter(|p| self.slots.holds(*p)) {
                self.slots.answered(pid);
                continue;
            }
            self.gates.remove(handle);
        }
        out
    }

    fn stop(&mut self, handles: &[Handle], grace: Duration) -> Vec<(Handle, i32)> {
        let (in_slots, others): (Vec<u32>, Vec<u32>) = handles
            .iter()
            .filter_map(|h| h.pid())
            .partition(|p| self.slots.holds(*p));
        let (mut targets, held) = self.slots.stop_targets(&in_slots);
        let mut out: Vec<(Handle, i32)> = held
            .into_iter()
            .map(|(pid, code)| (Handle::Pid { pid }, code))
            .collect();
        let mut waited: Vec<u32> = targets.iter().map(StopTarget::pid).collect();
        waited.dedup();
        // Groups are looked up before their leaders can exit and be reaped.
        targets.extend(others.iter().map(|p| StopTarget::group_of(*p)));
        waited.extend(&others);
        // One stop for all, slots and panes alike: one grace period.
        let codes = match self.notices() {
            Ok(notices) => process::stop_all(&targets, grace, notices),
            Err(_) => process::stop_all(&targets, grace, &mut process::NotOurChildren),
        };
        for pid in waited {
            let code = targets
                .iter()
                .zip(&codes)
                .find(|(t, c)| t.pid() == pid && c.is_some())
                .and_then(|(_, c)| *c)
                .unwrap_or(crate::diag::WrapperExit::KILLED.code());
            if self.slots.holds(pid) {
                // Stopped, and gone: what it still says is stale.
                self.slots.gone(pid);
                self.stopped.insert(pid);
            }
            out.push((Handle::Pid { pid }, code));
        }
        out
    }
}

/// How long exec, as it ends, waits for its wrapper slots to exit: an idle
/// one does at once, on its socket's end.
const SLOTS_END_WAIT: Duration = Duration::from_secs(2);

impl Drop for Local {
    fn drop(&mut self) {
        // exec leaves no process it started running behind it.
        self.slots.close();
        if let Some(notices) = self.notices.as_mut() {
            notices.end_slots(SLOTS_END_WAIT);
        }
    }
}

/// The backends of one exec, each attempt routed to its job's.
pub struct Backends {
    pub local: Local,
    /// Backends for the other kinds, made when a job first asks for one.
    others: Vec<(Backend, Box<dyn Dispatch>)>,
}

impl Backends {
    pub fn new(local: Local) -> Backends {
        Backends {
            local,
            others: Vec::new(),
        }
    }

    /// Serve jobs of `kind` with `backend`.
    pub fn add(&mut self, kind: Backend, backend: Box<dyn Dispatch>) {
        self.others.push((kind, backend));
    }

    /// The backend serving handles like `handle`, or jobs of `kind`.
    fn route(&mut self, kind: Option<Backend>, handle: Option<Handle>) -> &mut dyn Dispatch {
        let local_kind = |k: Backend| matches!(k, Backend::CliWrapper | Backend::Pane);
        let is_local = match (kind, handle) {
            (_, Some(Handle::Pid { .. })) => true,
            (Some(k), None) => local_kind(k),
            _ => false,
        };
        if !is_local {
            // A handle that is not a local pid belongs to the one backend
            // that is not local; a job goes to the backend of its kind.
            let found = self
                .others
                .iter_mut()
                .find(|(k, _)| kind.map_or(!local_kind(*k), |want| *k == want));
            if let Some((_, b)) = found {
                return b.as_mut();
            }
        }
        &mut self.local
    }
}

impl Dispatch for Backends {
    fn start(&mut self, launch: &Launch) -> io::Result<Started> {
        self.route(Some(launch.job.backend), None).start(launch)
    }
    fn release(&mut self, handle: Handle) -> io::Result<()> {
        self.route(None, Some(handle)).release(handle)
    }
    fn abandon(&mut self, handle: Handle) {
        self.route(None, Some(handle)).abandon(handle)
    }
    fn find(&mut self, d: &Dispatched) -> Found {
        self.route(None, Some(d.handle)).find(d)
    }
    fn adopt(&mut self, d: &Dispatched, status: &Path) {
        self.route(None, Some(d.handle)).adopt(d, status)
    }
    fn exits(&mut self, timeout: Duration) -> Vec<(Handle, i32)> {
        // The others are polled; the local one waits, woken by any exit.
        let mut out = Vec::new();
        for (_, b) in &mut self.others {
            out.extend(b.exits(Duration::ZERO));
        }
        let wait = if out.is_empty() {
            timeout
        } else {
            Duration::ZERO
        };
        out.extend(self.local.exits(wait));
        out
    }
    fn stop(&mut self, handles: &[Handle], grace: Duration) -> Vec<(Handle, i32)> {
        let mut out = self.local.stop(handles, grace);
        for (_, b) in &mut self.others {
            out.extend(b.stop(handles, grace));
        }
        out
    }
    fn ended(&mut self, handle: Handle) -> Option<End> {
        self.route(None, Some(handle)).ended(handle)
    }
    fn queued(&mut self, handle: Handle) -> bool {
        self.route(None, Some(handle)).queued(handle)
    }
    fn said(&mut self) -> Vec<String> {
        let mut out = self.local.said();
        for (_, b) in &mut self.others {
            out.extend(b.said());
        }
        out
    }
}
