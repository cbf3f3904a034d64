//! The `cli-wrapper` wrappers of one exec: a pool of slots, each a wrapper
//! that runs attempt after attempt (`okstra-worker --serve`, see
//! `crate::worker`), so a job costs one process start (its worker's), not
//! two.
//!
//! An attempt takes an idle slot (or a new one) when the runner starts it
//! held: the slot's pid is the attempt's handle, recorded with its
//! dispatch. [`Slots::release`] sends the slot its request only then, so
//! nothing of the attempt runs before its record is durable
//! (docs/exec.md#crash-safety-and-resume); [`Slots::abandon`] gives the slot
//! back unsent. A slot serves attempts of one environment (a job's `env` on top
//! of exec's), the one it was started with, so a worker sees the environment a
//! wrapper of its own would.

use crate::exec::notices::Notices;
use crate::process::{self, Log, SpawnSpec, StopTarget};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// What a slot is doing.
enum State {
    Idle,
    /// Taken by an attempt whose request waits for its record.
    Held {
        request: Vec<u8>,
        log: File,
    },
    /// Running the attempt it was sent.
    Running,
}

struct Slot {
    /// When its process started, to tell it from a later one with its pid.
    pid_start: Option<u64>,
    /// exec's end of its socket, for requests (answers are read by
    /// [`Notices`]).
    control: UnixStream,
    /// The pipe its worker pids come through: ours to read, and the end
    /// sent with each request.
    pids: OwnedFd,
    pids_end: OwnedFd,
    /// The last worker pid it reported: the process group of its attempt.
    worker: Option<u32>,
    env: Vec<(String, String)>,
    state: State,
}

/// What starts a slot, and where.
pub struct SlotStart<'a> {
    /// `okstra-worker --serve` (or `okstra worker-slot`).
    pub argv: &'a [String],
    pub cwd: &'a Path,
    pub env: &'a [(String, String)],
    /// The attempt's log: sent with its request, and a new slot's stderr
    /// until then.
    pub log: &'a File,
}

/// The slots of one exec, by pid.
#[derive(Default)]
pub struct Slots {
    slots: HashMap<u32, Slot>,
}

impl Slots {
    /// Whether `pid` is one of ours.
    pub fn holds(&self, pid: u32) -> bool {
        self.slots.contains_key(&pid)
    }

    /// Take an idle slot of `start.env` (or start one) for an attempt whose
    /// wrapper arguments are `args`: its pid and start time. Nothing is
    /// sent before [`Slots::release`].
    pub fn take(
        &mut self,
        start: &SlotStart,
        args: &[String],
        notices: &mut Notices,
    ) -> io::Result<(u32, Option<u64>)> {
        let mut request = serde_json::to_vec(args).map_err(io::Error::other)?;
        request.push(b'\n');
        let log = start.log.try_clone()?;
        let idle = self
            .slots
            .iter()
            .find(|(_, s)| matches!(s.state, State::Idle) && s.env == start.env)
            .map(|(pid, _)| *pid);
        let pid = match idle {
            Some(pid) => pid,
            None => self.open(start, notices)?,
        };
        let slot = self.slots.get_mut(&pid).expect("just found or made");
        slot.state = State::Held { request, log };
        Ok((pid, slot.pid_start))
    }

    fn open(&mut self, start: &SlotStart, notices: &mut Notices) -> io::Result<u32> {
        let (child, control) = process::spawn_with_socket(&SpawnSpec {
            argv: start.argv,
            cwd: start.cwd,
            env: start.env,
            log: Some(Log::File(start.log)),
            stdin: None,
        })?;
        let pid = child.pid();
        let (pids, pids_end) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        rustix::fs::fcntl_setfl(&pids, rustix::fs::OFlags::NONBLOCK)?;
        let watched = control.try_clone()?;
        notices.watch_slot(child, watched)?;
        self.slots.insert(
            pid,
            Slot {
                pid_start: process::start_time(pid),
                control,
                pids,
                pids_end,
                worker: None,
                env: start.env.to_vec(),
                state: State::Idle,
            },
        );
        Ok(pid)
    }

    /// Send slot `pid` its held request: from now on the attempt runs.
    pub fn release(&mut self, pid: u32, notices: &mut Notices) -> io::Result<()> {
        let Some(slot) = self.slots.get_mut(&pid) else {
            return Ok(());
        };
        let State::Held { request, log } = std::mem::replace(&mut slot.state, State::Running)
        else {
            return Ok(());
        };
        notices.sent(pid);
        // What it reports from now on is this attempt's worker; the last
        // one's group id may belong to anyone by now.
        slot.read_worker();
        slot.worker = None;
        let fds = [log.as_fd(), slot.pids_end.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut ancillary = SendAncillaryBuffer::new(&mut space);
        ancillary.push(SendAncillaryMessage::ScmRights(&fds));
        let sent = loop {
            match rustix::net::sendmsg(
                &slot.control,
                &[IoSlice::new(&request)],
                &mut ancillary,
                SendFlags::NOSIGNAL,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other,
            }
        };
        match sent {
            Ok(n) if n == request.len() => Ok(()),
            // Half a request never makes a line the slot runs; a slot
            // that took none is dead or beyond use: end it, so its end is
            // the attempt's.
            other => {
                let _ = StopTarget::Group { pid, pgid: pid }.signal(rustix::process::Signal::KILL);
                match other {
                    Ok(_) => Err(io::Error::other("the slot took part of a request")),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Give slot `pid` back unsent.
    pub fn abandon(&mut self, pid: u32) {
        if let Some(slot) = self.slots.get_mut(&pid) {
            if matches!(slot.state, State::Held { .. }) {
                slot.state = State::Idle;
            }
        }
    }

    /// Slot `pid` answered: it is idle again.
    pub fn answered(&mut self, pid: u32) {
        if let Some(slot) = self.slots.get_mut(&pid) {
            slot.read_worker();
            slot.state = State::Idle;
        }
    }

    /// Slot `pid` ended, or was stopped: forget it, and kill what it left: its own group,
    /// and, where it died mid-attempt, its worker's. Whether it was held
    /// for an attempt (its end is then that attempt's).
    pub fn gone(&mut self, pid: u32) -> bool {
        let Some(mut slot) = self.slots.remove(&pid) else {
            return false;
        };
        process::kill_leftovers(pid);
        if matches!(slot.state, State::Running) {
            slot.read_worker();
            match slot.worker {
                Some(worker) => process::kill_leftovers(worker),
                // It died after starting its worker but before saying so:
                // the worker is found by the mark it carries.
                None => {
                    process::kill_marked(crate::worker::SLOT_VAR, &pid.to_string(), slot.pid_start)
                }
            }
        }
        matches!(slot.state, State::Held { .. })
    }

    /// Forget every slot: [`Notices::end_slots`] ends them.
    pub fn close(&mut self) {
        self.slots.clear();
    }

    /// What stopping the attempts of these slots signals
    /// (docs/exec.md#running-a-stage): each running slot's group and its
    /// worker's, both waited for through the slot's pid. A held attempt never
    /// ran: it ends at once as a wrapper stopped at its gate would (143), its
    /// slot idle again; those are returned with their codes. Each stopped slot
    /// ends: call [`Slots::gone`] once the stop is over.
    pub fn stop_targets(&mut self, pids: &[u32]) -> (Vec<StopTarget>, Vec<(u32, i32)>) {
        let mut targets = Vec::new();
        let mut held = Vec::new();
        for &pid in pids {
            let Some(slot) = self.slots.get_mut(&pid) else {
                continue;
            };
            match slot.state {
                State::Held { .. } => {
                    slot.state = State::Idle;
                    held.push((pid, STOPPED_AT_GATE));
                }
                State::Idle => {}
                State::Running => {
                    slot.read_worker();
                    targets.push(StopTarget::Group { pid, pgid: pid });
                    if let Some(worker) = slot.worker {
                        targets.push(StopTarget::Group { pid, pgid: worker });
                    }
                }
            }
        }
        (targets, held)
    }
}

/// The exit code of a wrapper stopped at its gate (SIGTERM).
const STOPPED_AT_GATE: i32 = crate::diag::WrapperExit::TERMINATED.code();

impl Slot {
    /// Take the worker pids the slot reported since the last look.
    fn read_worker(&mut self) {
        let mut buf = [0u8; 512];
        let mut text = Vec::new();
        while let Ok(n @ 1..) = rustix::io::read(&self.pids, &mut buf) {
            text.extend_from_slice(&buf[..n]);
        }
        let last = String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| l.trim().parse::<u32>().ok())
            .next_back();
        if last.is_some() {
            self.worker = last;
        }
    }
}
