//! Child processes: started in their own process group so that stopping a
//! worker stops everything it started, watched through their log, and
//! stopped with SIGTERM to the group, a grace period, then SIGKILL, many at
//! once.
//!
//! Linux only: liveness checks read `/proc` so that zombies count as dead.
//! System calls std does not offer go through `rustix`.

mod spawn;
mod stop;

pub use spawn::{
    find_program, spawn, spawn_gated, spawn_in_caller_group, spawn_with_socket, Gate, Log,
    SpawnSpec, Spawned,
};
pub use stop::{stop_all, NotOurChildren, Reaper, StopTarget};

use rustix::process::Pid;
use std::fs;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `pid` as the kernel's type; `None` for 0 and for what no pid can be.
fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => crate::diag::WrapperExit::Signal(sig).code(),
        // Neither is possible for a reaped child on Linux; stay conservative.
        (None, None) => 1,
    }
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
    let Some(raw) = pid_of(pid) else {
        return false;
    };
    let exists = match rustix::process::test_kill_process(raw) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    };
    exists && !matches!(proc_stat(pid), Some(stat) if stat.state == 'Z')
}

/// SIGKILL whatever is left of process group `pgid` once its leader (a
/// worker's wrapper, which led the group) ended: members it left behind (a
/// worker whose wrapper was killed, a backgrounded grandchild) have no one
/// watching them any more, and what they write now would land in a later
/// stage's audit. Call it as soon as the leader was reaped: a group's id
/// stays taken while any member lives, so it names no one else.
///
/// Returns once they are gone (or after `LEFTOVERS_WAIT`): a killed
/// process runs no more of its code, but is not gone until the kernel got
/// to it, and whoever comes next (the next attempt, the audit) must not
/// see it.
pub fn kill_leftovers(pgid: u32) {
    if !group_alive(pgid) {
        return;
    }
    let _ = StopTarget::Group { pid: pgid, pgid }.signal(rustix::process::Signal::KILL);
    let deadline = std::time::Instant::now() + LEFTOVERS_WAIT;
    while group_alive(pgid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Kill the process groups of every process of ours that started no earlier
/// than `since` (clock ticks since boot) and whose environment, as it was
/// started, holds `var=value`: the way to find a worker whose pid its
/// wrapper never got to report. One look at the process table; processes
/// whose environment cannot be read (another user's) are not ours.
pub fn kill_marked(var: &str, value: &str, since: Option<u64>) {
    let entry = format!("{var}={value}");
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    let me = std::process::id();
    let marked: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| since.is_none_or(|s| start_time(pid).is_some_and(|t| t >= s)))
        .filter(|&pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == entry.as_bytes()))
        })
        .collect();
    for pid in marked {
        let group = pid_of(pid)
            .and_then(|p| rustix::process::getpgid(Some(p)).ok())
            .map(|g| g.as_raw_nonzero().get() as u32);
        let own = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
        match group {
            Some(pgid) if pgid > 1 && pgid != own => kill_leftovers(pgid),
            _ => {
                let _ = StopTarget::Process { pid }.signal(rustix::process::Signal::KILL);
            }
        }
    }
}

/// How long [`kill_leftovers`] waits for the killed to be gone: they go at
/// once unless stuck in the kernel, which must not hang the caller.
const LEFTOVERS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether any live (non-zombie) process is in process group `pgid`.
pub fn group_alive(pgid: u32) -> bool {
    group_alive_any(&[pgid])
}

/// Whether any live (non-zombie) process is in any of these process groups;
/// one look at the process table for all of them.
fn group_alive_any(pgids: &[u32]) -> bool {
    // A group nothing answers for is gone; groups 0 and 1 are never ours.
    let answering: Vec<u32> = pgids
        .iter()
        .copied()
        .filter(|&pgid| pgid > 1)
        .filter(|&pgid| {
            pid_of(pgid).is_some_and(|p| {
                rustix::process::test_kill_process_group(p) != Err(rustix::io::Errno::SRCH)
            })
        })
        .collect();
    if answering.is_empty() {
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
        .any(|stat| answering.contains(&stat.pgrp) && stat.state != 'Z')
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

/// When process `pid` started, in clock ticks since boot
/// (`/proc/<pid>/stat` field 22); `None` when there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "pid (comm)", whose comm may hold anything: state is field 3,
    // so starttime (22) is the 20th after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
/// Whether `pid` is alive (not a zombie) and is the process that started at
/// `start` (when known), not a later one that reused the pid.
pub fn same_process_alive(pid: u32, start: Option<u64>) -> bool {
    pid_alive(pid) && start.is_none_or(|s| start_time(pid) == Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::process::Signal;
    use std::thread;

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
            log: Some(Log::Path(&log)),
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
            log: Some(Log::Path(log)),
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
        assert_eq!(
            mask("SigIgn:") & (1 << (Signal::PIPE.as_raw() - 1)),
            0,
            "{out}"
        );
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
            log: Some(Log::Path(&log)),
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
    fn a_socket_child_reads_what_is_sent_and_eof_once_it_is_shut() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        // `head -c 1` ends at the byte or at end-of-file; wc counts what came.
        let a = argv(&["sh", "-c", "head -c 1 | wc -c | tr -d ' '"]);
        for send in [true, false] {
            let log = dir.path().join(format!("socket-{send}.log"));
            let (mut child, socket) = spawn_with_socket(&SpawnSpec {
                log: Some(Log::Path(&log)),
                ..spec(&a, dir.path())
            })
            .unwrap();
            if send {
                (&socket).write_all(b"x").unwrap();
            } else {
                socket.shutdown(std::net::Shutdown::Write).unwrap();
            }
            assert_eq!(child.wait().unwrap(), 0);
            let expected = if send { "1\n" } else { "0\n" };
            assert_eq!(fs::read_to_string(&log).unwrap(), expected, "{send}");
        }
        // The socket is the child's stdin; it cannot have another.
        let input = dir.path().join("in.txt");
        fs::write(&input, "x").unwrap();
        let err = spawn_with_socket(&SpawnSpec {
            stdin: Some(&input),
            ..spec(&a, dir.path())
        })
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn signal_death_maps_to_128_plus_signo() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["sh", "-c", "kill -KILL $$"]);
        let mut child = spawn(&spec(&a, dir.path())).unwrap();
        assert_eq!(child.wait().unwrap(), 128 + Signal::KILL.as_raw());
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
        assert_eq!(code, 128 + Signal::TERM.as_raw());
        assert!(!group_alive(pgid));
        assert!(!pid_alive(pgid));
    }

    #[test]
    fn kill_marked_ends_the_groups_of_marked_processes_alone() {
        let dir = tempfile::tempdir().unwrap();
        let a = argv(&["sh", "-c", "sleep 100 & sleep 100; true"]);
        let var = "OKSTRA_TEST_MARK";
        let value = format!("{}-{:?}", std::process::id(), Instant::now());
        let start = |mark: &str, argv: &[String], n: usize| {
            let env = [(var.to_string(), mark.to_string())];
            let spec = SpawnSpec {
                env: &env,
                ..spec(argv, dir.path())
            };
            let child = spawn(&spec).unwrap();
            let pgid = child.pid();
            let deadline = Instant::now() + Duration::from_secs(10);
            while members(pgid) < n && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
            (child, pgid)
        };
        let (mut older, older_pgid) = start(&value, &argv(&["sleep", "100"]), 1);
        let since = start_time(older_pgid).map(|t| t + 1);
        // Start times count clock ticks (10 ms): the next start is a tick
        // later (a wait for the clock's grain, not for another process).
        thread::sleep(Duration::from_millis(30));
        let (mut marked, marked_pgid) = start(&value, &a, 3);
        let (mut other, other_pgid) = start("another value", &a, 3);
        kill_marked(var, &value, since);
        assert!(
            !group_alive(marked_pgid),
            "the marked group, grandchild and all"
        );
        assert!(group_alive(other_pgid), "another mark is not ours");
        assert!(
            group_alive(older_pgid),
            "one older than `since` is not ours"
        );
        let _ = marked.wait();
        for child in [&mut older, &mut other] {
            let _ = child.stop_group(Duration::from_secs(5));
        }
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
        assert_eq!(code, 128 + Signal::KILL.as_raw());
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
        let ours = rustix::process::getpgrp().as_raw_pid() as u32;
        assert_eq!(proc_stat(child.pid()).unwrap().pgrp, ours);
        let code = child.stop_group(Duration::from_secs(5)).unwrap();
        assert_eq!(code, 128 + Signal::TERM.as_raw());
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
