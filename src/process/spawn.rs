//! Starting a child: std's `Command`, set up the one way okstra needs.
//!
//! The child gets `argv` (the program looked up on `PATH` when it has no
//! slash, on the child's own `PATH` when `env` gives one), the inherited
//! environment with `spec.env` on top, the working directory `spec.cwd`,
//! stdin from a file, `/dev/null` or a socket, stdout and stderr appended
//! to the log (or ours), and optionally a process group of its own. std
//! gives every child an empty signal mask and SIGPIPE back at its default
//! (the Rust runtime ignores it in okstra; a child should not inherit that),
//! and starts it with posix_spawn where it can (no pre-exec hook, no `PATH`
//! of the child's own: we resolve that here), so nothing of exec's memory is
//! copied per job. Every descriptor okstra opens is close-on-exec, so none
//! leaks into a child.

use super::exit_code_of;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::Access;
use rustix::process::Signal;
use std::cell::OnceCell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

/// How long [`Spawned::wait_timeout`] sleeps at a time without a pidfd.
const FALLBACK_WAIT_STEP: Duration = Duration::from_millis(2);

/// What to start and where its input and output go.
pub struct SpawnSpec<'a> {
    /// Program and arguments; `argv[0]` is looked up on `PATH`.
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// Added to (and overriding) the inherited environment; a key given
    /// twice keeps its last value.
    pub env: &'a [(String, String)],
    /// Where stdout and stderr go; `None` inherits ours.
    pub log: Option<Log<'a>>,
    /// stdin is read from here; `None` gives `/dev/null` (or, through
    /// [`spawn_with_socket`], a socket).
    pub stdin: Option<&'a Path>,
}

/// Where a child's stdout and stderr are appended.
#[derive(Debug, Clone, Copy)]
pub enum Log<'a> {
    /// This file, opened (and its directory made) here.
    Path(&'a Path),
    /// A file the caller opened already (exec opens a worker's log without
    /// following a symlink at any component,
    /// docs/exec.md#never-through-a-symlink).
    File(&'a File),
}

/// The write end of a gated child's stdin (see [`spawn_gated`]), or of the
/// FIFO a pane's wrapper reads: the child waits to read one byte before it
/// does anything. Dropping the gate closes it without releasing, and the
/// child reads end-of-file.
pub struct Gate {
    end: Box<dyn Write + Send>,
    released: bool,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("released", &self.released)
            .finish()
    }
}

impl Gate {
    /// A gate over the write end of a pipe or FIFO.
    pub fn new(end: impl Write + Send + 'static) -> Gate {
        Gate {
            end: Box::new(end),
            released: false,
        }
    }

    /// Let the child go: one byte. The gate stays open until dropped (a
    /// FIFO loses its byte when every end closes before it was read). An
    /// error means the child is gone already (`BrokenPipe`) or the write
    /// failed; either way it was not released.
    pub fn release(&mut self) -> io::Result<()> {
        if !self.released {
            self.end.write_all(b"\n")?;
            self.end.flush()?;
            self.released = true;
        }
        Ok(())
    }
}

/// A started child. Dropping it neither waits for nor kills the child.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    /// True when the child leads its own process group (its pgid is its pid).
    own_group: bool,
    /// The exit code once reaped, so later calls answer the same.
    code: Option<i32>,
    /// A pidfd for the child, opened on the first [`Spawned::pidfd`];
    /// `None` inside when the kernel has none (before Linux 5.3).
    pidfd: OnceCell<Option<OwnedFd>>,
}

/// Start `spec.argv` as the leader of a new process group, so that
/// [`Spawned::stop_group`] (and [`super::stop_all`]) reach every process it
/// starts.
pub fn spawn(spec: &SpawnSpec) -> io::Result<Spawned> {
    start(spec, true, None)
}

/// Start `spec.argv` as [`spawn`] does, but with a pipe as its stdin
/// (`spec.stdin` must be `None`), and return the pipe's write end: a
/// one-attempt wrapper started `okstra-worker --gated` waits for one byte
/// before it does anything (docs/exec.md#crash-safety-and-resume), and reads
/// end-of-file as never released.
pub fn spawn_gated(spec: &SpawnSpec) -> io::Result<(Spawned, Gate)> {
    // Both ends are close-on-exec: only the child's stdin (a dup) crosses
    // exec, so no other child holds the write end open and the gate's
    // closing is seen.
    let (read, write) = io::pipe()?;
    let child = start_reading(spec, Stdio::from(read), "a gated child reads its gate")?;
    Ok((child, Gate::new(write)))
}

/// Start `spec.argv` as [`spawn`] does, with one end of a Unix socket pair
/// as its stdin (`spec.stdin` must be `None`); the other end. exec starts a
/// wrapper slot this way (`okstra-worker --serve`, see `crate::worker`).
pub fn spawn_with_socket(spec: &SpawnSpec) -> io::Result<(Spawned, UnixStream)> {
    // Both ends are close-on-exec; the child's stdin is a dup of its end.
    let (ours, theirs) = UnixStream::pair()?;
    let stdin = Stdio::from(OwnedFd::from(theirs));
    let child = start_reading(spec, stdin, "a slot reads its requests")?;
    Ok((child, ours))
}

/// [`spawn`] with `stdin` in place of `spec.stdin`, which must be `None`:
/// `reads` says what the child reads there, for the refusal.
fn start_reading(spec: &SpawnSpec, stdin: Stdio, reads: &str) -> io::Result<Spawned> {
    if spec.stdin.is_some() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{reads} on stdin; it cannot have another stdin"),
        ));
    }
    start(spec, true, Some(stdin))
}

/// Start `spec.argv` in the caller's process group. The worker wrapper uses
/// this: exec puts the wrapper in a group of its own, and the wrapper's child
/// must stay in it so that stopping the wrapper's group stops the agent too.
/// [`Spawned::stop_group`] then signals the child alone, never the caller.
pub fn spawn_in_caller_group(spec: &SpawnSpec) -> io::Result<Spawned> {
    start(spec, false, None)
}

fn start(spec: &SpawnSpec, own_group: bool, stdin_end: Option<Stdio>) -> io::Result<Spawned> {
    let Some(program) = spec.argv.first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot start an empty argv",
        ));
    };
    // A PATH of the child's own is the one to search, as a shell would.
    // Resolved here, std starts the resolved path with posix_spawn; left to
    // std, it would fork to search the child's PATH after the fork.
    let path_override = spec.env.iter().rev().find(|(k, _)| k == "PATH");
    let mut cmd = match path_override {
        Some((_, path)) if !program.contains('/') => {
            let mut cmd = Command::new(find_program(program, path.as_ref())?);
            cmd.arg0(program);
            cmd
        }
        _ => Command::new(program),
    };
    cmd.args(&spec.argv[1..])
        .current_dir(spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(match (stdin_end, spec.stdin) {
        (Some(end), _) => end,
        (None, Some(path)) => Stdio::from(File::open(path)?),
        (None, None) => Stdio::null(),
    });
    let log = match spec.log {
        Some(Log::Path(path)) => Some(open_log(path)?),
        Some(Log::File(file)) => Some(file.try_clone()?),
        None => None,
    };
    if let Some(log) = log {
        cmd.stdout(log.try_clone()?).stderr(log);
    }
    if own_group {
        // setpgid(0, 0) in the child before exec: the group exists before
        // spawn returns, so anyone may signal it at once.
        cmd.process_group(0);
    }
    let child = cmd.spawn()?;
    Ok(Spawned {
        child,
        own_group,
        code: None,
        pidfd: OnceCell::new(),
    })
}

/// `program` in the first directory of `path` (a `PATH` value) that holds
/// it as a file we may execute (an empty entry is the working directory):
/// NotFound, or PermissionDenied when only files we may not execute were
/// seen, as a shell would report.
pub fn find_program(program: &str, path: &std::ffi::OsStr) -> io::Result<PathBuf> {
    let mut denied = false;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if !fs::metadata(&candidate).is_ok_and(|m| m.is_file()) {
            continue;
        }
        if rustix::fs::access(&candidate, Access::EXEC_OK).is_ok() {
            return Ok(candidate);
        }
        denied = true;
    }
    Err(if denied {
        rustix::io::Errno::ACCESS
    } else {
        rustix::io::Errno::NOENT
    }
    .into())
}

fn open_log(path: &Path) -> io::Result<File> {
    let open = || OpenOptions::new().create(true).append(true).open(path);
    match open() {
        // The log's directory exists nearly always (the prompt lives there):
        // make it only when missing, not on every start.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent)?;
            }
            open()
        }
        other => other,
    }
}

impl Spawned {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it leads a process group of its own.
    pub fn leads_group(&self) -> bool {
        self.own_group
    }

    /// What stopping this child signals: its own group, or the child alone
    /// when it runs in the caller's group.
    pub fn stop_target(&self) -> super::StopTarget {
        let pid = self.pid();
        if self.own_group {
            super::StopTarget::Group { pid, pgid: pid }
        } else {
            super::StopTarget::Process { pid }
        }
    }

    /// A pidfd for the child, readable once it ended (opened on first use,
    /// kept while `self` lives); `None` when the kernel has none.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        let pid = self.pid();
        self.pidfd
            .get_or_init(|| {
                let pid = super::pid_of(pid)?;
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            })
            .as_ref()
            .map(|fd| fd.as_fd())
    }

    /// Non-blocking: `Some(exit code)` once the child ended (reaping it);
    /// a death by signal maps to 128 + the signal number.
    pub fn try_wait(&mut self) -> io::Result<Option<i32>> {
        if self.code.is_none() {
            if let Some(status) = self.child.try_wait()? {
                self.code = Some(exit_code_of(status));
            }
        }
        Ok(self.code)
    }

    /// Wait at most `limit` for the child to end: `Some(exit code)` once it
    /// did. Returns as soon as the child exits (the wait is a `poll` on a
    /// pidfd), or early when a signal arrives, so callers can look at their
    /// stop flags in between. Without pidfd support it sleeps briefly instead.
    pub fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<i32>> {
        if let Some(code) = self.try_wait()? {
            return Ok(Some(code));
        }
        wait_for_any(std::slice::from_ref(self), limit);
        self.try_wait()
    }

    /// Block until the child ends; its exit code.
    pub fn wait(&mut self) -> io::Result<i32> {
        if let Some(code) = self.code {
            return Ok(code);
        }
        let code = exit_code_of(self.child.wait()?);
        self.code = Some(code);
        Ok(code)
    }

    /// Send `signal` to the child's group (or to the child alone when it was
    /// started in the caller's group). A group that is already gone is fine.
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        // Once reaped, a lone child's pid may belong to someone else.
        if !self.own_group && self.code.is_some() {
            return Ok(());
        }
        self.stop_target().signal(signal)
    }

    /// SIGTERM to the whole group, wait up to `grace` for the child and every
    /// other member to end, then SIGKILL the group; reap the child and return
    /// its exit code. Members that outlive the child (a backgrounded
    /// grandchild) are stopped too. For a child started with
    /// [`spawn_in_caller_group`] the signals go to the child alone.
    pub fn stop_group(&mut self, grace: Duration) -> io::Result<i32> {
        if !self.own_group {
            if let Some(code) = self.try_wait()? {
                return Ok(code);
            }
        }
        let target = [self.stop_target()];
        match super::stop_all(&target, grace, std::slice::from_mut(self))[0] {
            Some(code) => Ok(code),
            // Killed, yet not gone within the stop's wait (stuck in the
            // kernel): wait for as long as that takes.
            None => self.wait(),
        }
    }
}

/// Wait at most `limit` for any of `children` to end (a `poll` on their
/// pidfds), returning early when a signal arrives. Reaps nothing.
fn wait_for_any<'a>(children: impl IntoIterator<Item = &'a Spawned>, limit: Duration) {
    let children: Vec<&Spawned> = children.into_iter().collect();
    let fds: Vec<BorrowedFd> = children.iter().filter_map(|c| c.pidfd()).collect();
    if fds.len() < children.len() {
        thread::sleep(limit.min(FALLBACK_WAIT_STEP));
        return;
    }
    let mut polled: Vec<PollFd> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let timeout = Timespec::try_from(limit).unwrap_or(Timespec {
        tv_sec: i64::from(i32::MAX),
        tv_nsec: 0,
    });
    // EINTR (a signal) just returns early, which is what callers want.
    let _ = poll(&mut polled, Some(&timeout));
}

/// Our own children reap themselves: `stop_all` waits on their pidfds.
impl super::Reaper for [Spawned] {
    fn reap(&mut self, pids: &[u32], timeout: Duration) -> Vec<(u32, Option<i32>)> {
        let ended = |children: &mut [Spawned]| -> Vec<(u32, Option<i32>)> {
            children
                .iter_mut()
                .filter(|c| pids.contains(&c.pid()))
                .filter_map(|c| match c.try_wait() {
                    Ok(Some(code)) => Some((c.pid(), Some(code))),
                    Ok(None) => None,
                    // Not waitable any more: gone, code unknown.
                    Err(_) => Some((c.pid(), None)),
                })
                .collect()
        };
        let now = ended(self);
        if !now.is_empty() || timeout.is_zero() {
            return now;
        }
        let watched: Vec<&Spawned> = self.iter().filter(|c| pids.contains(&c.pid())).collect();
        if watched.is_empty() {
            thread::sleep(timeout);
            return Vec::new();
        }
        wait_for_any(watched, timeout);
        ended(self)
    }
}
