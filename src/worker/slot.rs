//! One wrapper for attempt after attempt: a *slot*
//! (docs/exec.md#crash-safety-and-resume).
//!
//! Starting a process costs more on a virtual machine than everything the
//! wrapper does for a short job (benches/README.md, "what stands between
//! okstra and half of GNU parallel"). So exec keeps a few wrappers, one per
//! slot of its concurrency and of the attempts it holds ready, and hands
//! each one attempt at a time; the worker itself is still a process of its
//! own, as it must be.
//!
//! The slot's stdin is one end of a Unix socket pair; exec holds the other.
//! - A **request** is one line, the attempt's wrapper arguments as a JSON
//!   array (what follows `okstra worker` in the plan), sent in one message
//!   with two `SCM_RIGHTS` descriptors: the attempt's log (exec opens it,
//!   never through a symlink, docs/exec.md#never-through-a-symlink), which
//!   becomes the slot's stdout and stderr as it is a one-attempt wrapper's, and
//!   the pipe for worker pids (below). exec sends it only once the dispatch
//!   naming this slot's pid is durable: the slot's request is the gate's byte
//!   of a one-attempt wrapper.
//! - The **answer** is one line on the same socket, `exit <code>`, once the
//!   attempt's status sidecar holds its end and what its worker left in its
//!   process group was killed.
//! - The pid pipe, which exec reads only when it must: the pid of each
//!   worker, which leads a process group of its own, written as soon as it
//!   started, so that exec's concurrent stop (docs/exec.md#running-a-stage)
//!   reaches it even if the slot itself is stuck or gone.
//!
//! End of input (exec closed its end, or died) ends the slot: an attempt
//! recorded but never sent was never started, as at a closed gate. An
//! attempt under way when exec dies is finished and its sidecar written
//! first, so a later exec settles it from the sidecar. SIGTERM or SIGINT
//! stops the attempt under way (its worker's group: SIGTERM, grace,
//! SIGKILL), answers, and ends the slot.

use super::{execute, say, Ahead, SignalGuard, Timing};
use crate::diag::WrapperExit;
use crate::vocab::Confinement;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The argument that makes `okstra-worker` a slot.
pub const SERVE_FLAG: &str = "--serve";

/// How long an idle slot waits on its socket before it looks at its stop
/// flag again (a signal also wakes it at once).
const IDLE_POLL: Duration = Duration::from_millis(200);

/// The longest request a slot reads: far more than any wrapper argv.
const LONGEST_REQUEST: usize = 4 << 20;

/// What an idle slot waited for.
enum Next {
    /// An attempt: its wrapper arguments, its log and the pid pipe.
    Attempt(Vec<String>, OwnedFd, OwnedFd),
    /// End of input, a request that cannot be read, or a stop.
    End,
}

/// Serve attempts from stdin until it ends; the exit code of the slot.
pub fn serve(bin_name: &'static str, timing: Timing) -> i32 {
    let (stop, _signals) = match SignalGuard::stop_flag() {
        Ok(installed) => installed,
        Err(exit) => return exit.code(),
    };
    let stdin = io::stdin();
    let control = stdin.as_fd();
    let mut pending = Vec::new();
    // What confining a child needs, made while the slot waits: for the next
    // attempt, once the last was confined (a plan's jobs mostly are alike).
    let mut ready: Option<Ahead> = None;
    let mut reader = super::args::Reader::new(bin_name);
    loop {
        let (argv, log, pids) = match next(control, &stop, &mut pending) {
            Next::Attempt(argv, log, pids) => (argv, log, pids),
            Next::End => return 0,
        };
        // The attempt's output, the worker's and the wrapper's own words,
        // goes to its log, as a one-attempt wrapper's does.
        let pointed =
            rustix::stdio::dup2_stdout(&log).and_then(|()| rustix::stdio::dup2_stderr(&log));
        let code = match (pointed, reader.read(&argv)) {
            (Err(err), _) => {
                say(format_args!(
                    "cannot point the attempt's output at its log: {err}"
                ));
                WrapperExit::Usage.code()
            }
            (Ok(()), Ok(args)) => {
                let mut pids = PidReport(pids);
                let ahead = match ready.take() {
                    Some(ahead) if args.confinement != Confinement::None => Some(ahead),
                    _ => Ahead::make(&args),
                };
                let code = execute(&args, &stop, timing, ahead, Some(&mut pids));
                ready = Ahead::make(&args);
                code
            }
            (Ok(()), Err(err)) => {
                say(format_args!(
                    "exec sent arguments the wrapper refuses: {err}"
                ));
                WrapperExit::Usage.code()
            }
        };
        if answer(control, code).is_err() || stop.load(Ordering::Relaxed) {
            return code;
        }
    }
}

/// `exit <code>` on the socket.
fn answer(control: BorrowedFd, code: i32) -> io::Result<()> {
    let line = format!("exit {code}\n");
    let mut out = line.as_bytes();
    while !out.is_empty() {
        match rustix::io::write(control, out) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => out = &out[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Wait for the next request: its line (the descriptors come with its
/// first byte), or the end. `pending` holds bytes read past a line (none,
/// as exec sends one request at a time, but a slot does not rely on it).
fn next(control: BorrowedFd, stop: &AtomicBool, pending: &mut Vec<u8>) -> Next {
    let mut fds: Vec<OwnedFd> = Vec::new();
    loop {
        if let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let mut fds = fds.into_iter();
            return match (
                serde_json::from_slice::<Vec<String>>(&line),
                fds.next(),
                fds.next(),
            ) {
                (Ok(argv), Some(log), Some(pids)) => Next::Attempt(argv, log, pids),
                (Ok(_), _, _) => {
                    say(format_args!(
                        "exec sent an attempt without its log and pid pipe"
                    ));
                    Next::End
                }
                (Err(err), _, _) => {
                    say(format_args!(
                        "exec sent a request that is not an argv: {err}"
                    ));
                    Next::End
                }
            };
        }
        if pending.len() > LONGEST_REQUEST {
            say(format_args!(
                "exec sent a request of more than {LONGEST_REQUEST} bytes"
            ));
            return Next::End;
        }
        if stop.load(Ordering::Relaxed) {
            return Next::End;
        }
        if !readable(control) {
            continue;
        }
        let mut buf = [0u8; 8192];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            control,
            &mut [IoSliceMut::new(&mut buf)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        );
        let got = match got {
            Ok(got) => got,
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
            Err(_) => return Next::End,
        };
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        if got.bytes == 0 {
            return Next::End;
        }
        pending.extend_from_slice(&buf[..got.bytes]);
    }
}

/// Whether `control` has something to read (or has ended), waiting at most
/// [`IDLE_POLL`]; a signal returns early.
fn readable(control: BorrowedFd) -> bool {
    let mut fds = [PollFd::new(&control, PollFlags::IN)];
    let timeout = Timespec::try_from(IDLE_POLL).unwrap_or_default();
    matches!(poll(&mut fds, Some(&timeout)), Ok(n) if n > 0)
}

/// Where a slot tells exec each worker's pid (its process group).
pub(super) struct PidReport(OwnedFd);

/// The variable every worker of a slot carries, naming the slot's pid: a
/// slot killed between starting a worker and reporting its pid leaves exec
/// no other way to find that worker ([`crate::process::kill_marked`]).
pub const SLOT_VAR: &str = "OKSTRA_SLOT";

impl PidReport {
    /// What marks this slot's workers in their environment.
    pub fn marker(&self) -> (String, String) {
        (SLOT_VAR.to_string(), std::process::id().to_string())
    }

    /// Say `pid`, in one write; exec reads it only when it must, so a
    /// failure here (exec gone) changes nothing for the attempt.
    pub fn started(&mut self, pid: u32) {
        let _ = rustix::io::write(&self.0, format!("{pid}\n").as_bytes());
    }
}
