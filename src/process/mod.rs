//! Child processes: started in their own process group so that stopping a
//! worker stops everything it started, watched through their log, and stopped
//! with SIGTERM to the group, a grace period, then SIGKILL.
//!
//! Linux only: liveness checks read `/proc` so that zombies count as dead.

mod gate;
mod spawn;

pub use gate::{same_process_alive, spawn_gated, start_time, Gate};

use std::ffi::c_int;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How often the stop loop looks at the child while it waits out the grace.
const STOP_POLL: Duration = Duration::from_millis(20);

/// How long [`Spawned::wait_timeout`] sleeps at a time without a pidfd.
const FALLBACK_WAIT_STEP: Duration = Duration::from_millis(2);

/// A pidfd for `pid` (readable once the process ended), if the kernel has them.
fn open_pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; nothing is borrowed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the descriptor was just created and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What to start and where its input and output go.
pub struct SpawnSpec<'a> {
    /// Program and arguments; `argv[0]` is looked up on `PATH`.
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// Added to (and overriding) the inherited environment.
    pub env: &'a [(String, String)],
    /// stdout and stderr are appended here; `None` inherits ours.
    pub log: Option<&'a Path>,
    /// stdin is read from here; `None` gives `/dev/null`.
    pub stdin: Option<&'a Path>,
}

/// A started child. Dropping it neither waits for nor kills the child.
#[derive(Debug)]
pub struct Spawned {
    pid: u32,
    /// True when the child leads its own process group (its pgid is its pid).
    own_group: bool,
    /// The exit code once reaped, so later calls answer the same.
    code: Option<i32>,
    /// A pidfd for the child, opened on the first [`Spawned::pidfd`];
    /// `None` inside when the kernel has none (before Linux 5.3).
    pidfd: std::cell::OnceCell<Option<OwnedFd>>,
}

/// Start `spec.argv` as the leader of a new process group, so that
/// [`Spawned::stop_group`] reaches every process it starts.
pub fn spawn(spec: &SpawnSpec) -> io::Result<Spawned> {
    start(spec, true)
}

/// Start `spec.argv` in the caller's process group. The worker wrapper uses
/// this: exec puts the wrapper in a group of its own, and the wrapper's child
/// must stay in it so that stopping the wrapper's group stops the agent too.
/// [`Spawned::stop_group`] then signals the child alone, never the caller.
pub fn spawn_in_caller_group(spec: &SpawnSpec) -> io::Result<Spawned> {
    start(spec, false)
}

fn start(spec: &SpawnSpec, own_group: bool) -> io::Result<Spawned> {
    let stdin = match spec.stdin {
        Some(path) => File::open(path)?,
        None => File::open("/dev/null")?,
    };
    start_with_stdin(spec, own_group, &stdin)
}

fn start_with_stdin(spec: &SpawnSpec, own_group: bool, stdin: &File) -> io::Result<Spawned> {
    if spec.argv.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot start an empty argv",
        ));
    }
    let out = spec.log.map(open_log).transpose()?;
    let pid = spawn::posix_spawn(spec, own_group, stdin, out.as_ref())?;
    Ok(Spawned {
        pid,
        own_group,
        code: None,
        pidfd: std::cell::OnceCell::new(),
    })
}

/// `program` in the first directory of `path` (a `PATH` value) that holds
/// it as a file we may execute (an empty entry is the working directory):
/// NotFound, or PermissionDenied when only files we may not execute were
/// seen, as a shell would report.
pub fn find_program(program: &str, path: &std::ffi::OsStr) -> io::Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
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
        let Ok(c) = std::ffi::CString::new(candidate.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: a NUL-terminated path; access(2) only reads it.
        if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
            return Ok(candidate);
        }
        denied = true;
    }
    Err(io::Error::from_raw_os_error(if denied {
        libc::EACCES
    } else {
        libc::ENOENT
    }))
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

/// waitpid(2) on our child `pid`: its status once it ended (and is reaped),
/// `None` while it runs (with `WNOHANG`). Retried when a signal interrupts.
fn wait_pid(pid: u32, flags: c_int) -> io::Result<Option<ExitStatus>> {
    loop {
        let mut status: c_int = 0;
        // SAFETY: a valid out-pointer for the status; no other preconditions.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) };
        match rc {
            0 => return Ok(None),
            -1 => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
            _ => return Ok(Some(ExitStatus::from_raw(status))),
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        // Neither is possible for a reaped child on Linux; stay conservative.
        (None, None) => 1,
    }
}

impl Spawned {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A pidfd for the child, readable once it ended (opened on first use,
    /// kept while `self` lives); `None` when the kernel has none.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        let pid = self.pid;
        self.pidfd
            .get_or_init(|| open_pidfd(pid))
            .as_ref()
            .map(|fd| fd.as_fd())
    }

    /// Non-blocking: `Some(exit code)` once the child ended (reaping it);
    /// a death by signal maps to 128 + the signal number.
    pub fn try_wait(&mut self) -> io::Result<Option<i32>> {
        if self.code.is_none() {
            if let Some(status) = wait_pid(self.pid, libc::WNOHANG)? {
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
        match self.pidfd() {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = limit.as_millis().min(i32::MAX as u128) as libc::c_int;
                // SAFETY: one valid pollfd that lives across the call. EINTR
                // (a signal) just returns early, which is what callers want.
                unsafe { libc::poll(&mut pfd, 1, ms) };
            }
            None => thread::sleep(limit.min(FALLBACK_WAIT_STEP)),
        }
        self.try_wait()
    }

    /// Block until the child ends; its exit code.
    pub fn wait(&mut self) -> io::Result<i32> {
        if let Some(code) = self.code {
            return Ok(code);
        }
        let status =
            wait_pid(self.pid, 0)?.ok_or_else(|| io::Error::other("waitpid returned no status"))?;
        let code = exit_code_of(status);
        self.code = Some(code);
        Ok(code)
    }

    /// Send `signal` to the child's group (or to the child alone when it was
    /// started in the caller's group). A group that is already gone is fine.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        let target = if self.own_group {
            -(self.pid as libc::pid_t)
        } else {
            // Once reaped, the pid may belong to someone else.
            if self.code.is_some() {
                return Ok(());
            }
            self.pid as libc::pid_t
        };
        // SAFETY: kill(2) has no memory-safety preconditions.
        let rc = unsafe { libc::kill(target, signal) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            Ok(())
        } else {
            Err(err)
        }
    }

    /// SIGTERM to the whole group, wait up to `grace` for the child and every
    /// other member to end, then SIGKILL the group; reap the child and return
    /// its exit code. Members that outlive the child (a backgrounded
    /// grandchild) are stopped too. For a child started with
    /// [`spawn_in_caller_group`] the signals go to the child alone.
    pub fn stop_group(&mut self, grace: Duration) -> io::Result<i32> {
        self.signal(libc::SIGTERM)?;
        let deadline = Instant::now() + grace;
        loop {
            let ended = self.try_wait()?.is_some();
            let group_gone = !self.own_group || !group_alive(self.pid);
            if ended && group_gone {
                return self.wait();
            }
            if Instant::now() >= deadline {
                break;
            }
            thread::sleep(STOP_POLL);
        }
        self.signal(libc::SIGKILL)?;
        let code = self.wait()?;
        if self.own_group {
            // Other members die from SIGKILL at once, but may take a moment to
            // leave the process table; wait briefly so callers see them gone.
            let settle = Instant::now() + Duration::from_secs(1);
            while group_alive(self.pid) && Instant::now() < settle {
                thread::sleep(STOP_POLL);
            }
        }
        Ok(code)
    }
}

/// The process group to signal for a worker exec knows only by pid: the
/// group it leads or belongs to, never the caller's own group. Look it up
/// while the pid is alive: once it is reaped the lookup fails.
pub fn group_of(pid: u32) -> u32 {
    let raw = pid as libc::pid_t;
    // SAFETY: getpgid has no memory-safety preconditions.
    let pgid = unsafe { libc::getpgid(raw) };
    let own = unsafe { libc::getpgid(0) };
    if pgid <= 0 || pgid == own {
        pid
    } else {
        pgid as u32
    }
}

/// Send `signal` to process group `pgid`; a group already gone is fine.
pub fn signal_group(pgid: u32, signal: i32) {
    // SAFETY: killpg has no memory-safety preconditions.
    unsafe { libc::killpg(pgid as libc::pid_t, signal) };
}

/// Watches a log for growth, for idle timeouts: a worker is idle while its log
/// has not grown. A missing log counts as empty.
#[derive(Debug)]
pub struct LogWatch {
    path: PathBuf,
    last_len: u64,
    last_change: Instant,
}

impl LogWatch {
    /// Starts the idle clock now.
    pub fn new(path: PathBuf) -> Self {
        let last_len = file_len(&path);
        LogWatch {
            path,
            last_len,
            last_change: Instant::now(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How long the log has gone without changing size; a change resets it.
    pub fn idle_for(&mut self) -> Duration {
        self.observe(Instant::now())
    }

    fn observe(&mut self, now: Instant) -> Duration {
        let len = file_len(&self.path);
        // Any size change counts as activity: a truncated and rewritten log is
        // a live worker too.
        if len != self.last_len {
            self.last_len = len;
            self.last_change = now;
        }
        now.saturating_duration_since(self.last_change)
    }
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A flag set when okstra itself receives SIGINT (Ctrl-C) or SIGTERM, so the
/// executor can stop its workers and exit 130 instead of dying with them
/// orphaned. Installing it replaces the default "terminate" action for both
/// signals in this process; call it once.
pub fn interrupt_flag() -> io::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&flag))?;
    }
    Ok(flag)
}

/// Whether a process with this pid exists and is not a zombie. A process we
/// may not signal (EPERM) still exists.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks for existence.
    let rc = unsafe { libc::kill(raw, 0) };
    let exists = rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !matches!(proc_stat(pid), Some(stat) if stat.state == 'Z')
}

/// Whether any live (non-zombie) process is in process group `pgid`.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if raw <= 1 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks for existence.
    if unsafe { libc::kill(-raw, 0) } != 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return false;
    }
    // Something answered, but zombies answer too: look for a live member.
    let Ok(entries) = fs::read_dir("/proc") else {
        return true;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .any(|stat| stat.pgrp == pgid && stat.state != 'Z')
}

struct ProcStat {
    state: char,
    pgrp: u32,
}

/// The state and process group from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses,
    // so split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcStat { state, pgrp })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn spec<'a>(argv: &'a [String], cwd: &'a Path) -> SpawnSpec<'a> {
        SpawnSpec {
            argv,
            cwd,
            env: &[],
            log: None,
            stdin: None,
        }
    }

    #[test]
    fn child_leads_its_own_group() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["sleep", "30"]);
        let mut child = spawn(&spec(&a, dir.path())).unwrap();
        let stat = proc_stat(child.pid()).unwrap();
        assert_eq!(stat.pgrp, child.pid());
        child.stop_group(Duration::from_secs(5)).unwrap();
    }

    #[test]
    fn output_stdin_env_and_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        fs::write(&input, "from stdin\n").unwrap();
        let log = dir.path().join("nested/dir/out.log");
        fs::create_dir_all(log.parent().unwrap()).unwrap();
        fs::write(&log, "earlier\n").unwrap();
        let a = argv(&[
            "sh",
            "-c",
            "cat; echo \"$GREETING\"; pwd; echo oops >&2; exit 3",
        ]);
        let env = [("GREETING".to_string(), "hello".to_string())];
        let mut child = spawn(&SpawnSpec {
            argv: &a,
            cwd: dir.path(),
            env: &env,
            log: Some(&log),
            stdin: Some(&input),
        })
        .unwrap();
        assert_eq!(child.wait().unwrap(), 3);
        assert_eq!(child.try_wait().unwrap(), Some(3));
        let text = fs::read_to_string(&log).unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(
            text,
            format!("earlier\nfrom stdin\nhello\n{}\noops\n", cwd.display())
        );
    }

    /// Run `argv` with `env` on top of ours, stdout and stderr to `log`;
    /// its exit code and the log's content.
    fn run_logged(
        dir: &Path,
        log: &Path,
        argv: &[String],
        env: &[(String, String)],
    ) -> (i32, String) {
        let mut child = spawn(&SpawnSpec {
            env,
            log: Some(log),
            ..spec(argv, dir)
        })
        .unwrap();
        let code = child.wait().unwrap();
        (code, fs::read_to_string(log).unwrap())
    }

    #[test]
    fn the_child_starts_with_no_signal_blocked_and_sigpipe_not_ignored() {
        // The test harness, like okstra, runs with SIGPIPE ignored.
        let dir = tempfile::tempdir().unwrap();
        // grep reads its own masks: the child itself, no shell between (a
        // shell blocks every signal while it waits for a command).
        let a = argv(&["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"]);
        let (code, out) = run_logged(dir.path(), &dir.path().join("masks.log"), &a, &[]);
        assert_eq!(code, 0, "{out}");
        let mask = |name: &str| {
            let line = out.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0);
        assert_eq!(mask("SigIgn:") & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value_and_others_are_inherited() {
        let dir = tempfile::tempdir().unwrap();
        let env = [
            ("OKSTRA_T".to_string(), "first".to_string()),
            ("OKSTRA_T".to_string(), "last".to_string()),
        ];
        let a = argv(&["sh", "-c", "echo \"$OKSTRA_T\"; echo \"${HOME:+home}\""]);
        let (code, out) = run_logged(dir.path(), &dir.path().join("env.log"), &a, &env);
        assert_eq!((code, out.as_str()), (0, "last\nhome\n"));
    }

    #[test]
    fn a_path_of_the_childs_own_is_the_one_searched() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        let tool = bin.join("okstra-test-tool");
        fs::write(&tool, "#!/bin/sh\necho found \"$PATH\"\n").unwrap();
        fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let env = [("PATH".to_string(), path.clone())];
        let log = dir.path().join("tool.log");
        let a = argv(&["okstra-test-tool"]);
        let mut child = spawn(&SpawnSpec {
            env: &env,
            log: Some(&log),
            ..spec(&a, dir.path())
        })
        .unwrap();
        assert_eq!(child.wait().unwrap(), 0);
        assert_eq!(fs::read_to_string(&log).unwrap(), format!("found {path}\n"));
        // Not on our own PATH, so without the override it is not found.
        let err = spawn(&spec(&a, dir.path())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);

        // Only a non-executable file of that name: refused as such.
        fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        let err = spawn(&SpawnSpec {
            env: &env,
            ..spec(&a, dir.path())
        })
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn log_parent_dirs_are_created_and_stdin_defaults_to_null() {
        let dir = tempfile::tempdir().unwrap();
        // Nothing of the log's path exists yet; stdin gives no bytes.
        let log = dir.path().join("not/yet/there.log");
        let a = argv(&["sh", "-c", "echo made; wc -c | tr -d ' '"]);
        let (code, out) = run_logged(dir.path(), &log, &a, &[]);
        assert_eq!(code, 0);
        assert_eq!(out, "made\n0\n");
    }

    #[test]
    fn missing_program_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["okstra-no-such-program-xyz"]);
        let err = spawn(&spec(&a, dir.path())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let empty: Vec<String> = Vec::new();
        let err = spawn(&spec(&empty, dir.path())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn signal_death_maps_to_128_plus_signo() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["sh", "-c", "kill -KILL $$"]);
        let mut child = spawn(&spec(&a, dir.path())).unwrap();
        assert_eq!(child.wait().unwrap(), 128 + libc::SIGKILL);
    }

    #[test]
    fn stop_group_takes_grandchildren_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["sh", "-c", "sleep 100 & sleep 100; true"]);
        let mut child = spawn(&spec(&a, dir.path())).unwrap();
        let pgid = child.pid();
        // Wait (without a fixed sleep) until both sleeps are in the group.
        let deadline = Instant::now() + Duration::from_secs(10);
        while members(pgid) < 3 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(members(pgid), 3, "sh and two sleeps");
        let code = child.stop_group(Duration::from_secs(5)).unwrap();
        assert_eq!(code, 128 + libc::SIGTERM);
        assert!(!group_alive(pgid));
        assert!(!pid_alive(pgid));
    }

    #[test]
    fn stop_group_kills_what_ignores_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let a = argv(&["sh", "-c", "trap '' TERM; touch ready; sleep 100"]);
        let mut child = spawn(&spec(&a, dir.path())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        // `sleep` inherits the ignored SIGTERM, so only SIGKILL ends the group.
        let code = child.stop_group(Duration::from_millis(200)).unwrap();
        assert_eq!(code, 128 + libc::SIGKILL);
        assert!(!group_alive(child.pid()));
    }

    #[test]
    fn stop_group_after_exit_returns_the_code() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["sh", "-c", "exit 7"]);
        let mut child = spawn(&spec(&a, dir.path())).unwrap();
        assert_eq!(child.wait().unwrap(), 7);
        assert_eq!(child.stop_group(Duration::from_secs(1)).unwrap(), 7);
    }

    #[test]
    fn caller_group_child_is_stopped_alone() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["sleep", "30"]);
        let mut child = spawn_in_caller_group(&spec(&a, dir.path())).unwrap();
        // SAFETY: getpgrp has no preconditions.
        let ours = unsafe { libc::getpgrp() } as u32;
        assert_eq!(proc_stat(child.pid()).unwrap().pgrp, ours);
        let code = child.stop_group(Duration::from_secs(5)).unwrap();
        assert_eq!(code, 128 + libc::SIGTERM);
        assert!(!pid_alive(child.pid()));
    }

    #[test]
    fn pid_alive_sees_ourselves_and_not_nonsense() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }

    #[test]
    fn log_watch_resets_on_growth() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.log");
        let mut watch = LogWatch::new(path.clone());
        let t0 = watch.last_change;
        assert_eq!(
            watch.observe(t0 + Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        fs::write(&path, "progress\n").unwrap();
        assert_eq!(watch.observe(t0 + Duration::from_secs(6)), Duration::ZERO);
        assert_eq!(
            watch.observe(t0 + Duration::from_secs(9)),
            Duration::from_secs(3)
        );
        assert_eq!(watch.path(), path.as_path());
    }

    fn members(pgid: u32) -> usize {
        fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(proc_stat)
            .filter(|s| s.pgrp == pgid && s.state != 'Z')
            .count()
    }
}
