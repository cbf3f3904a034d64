//! Git lock files left in okstra's own places by a git that was killed.
//!
//! Git takes a lock by creating `<file>.lock` and drops it by renaming or
//! removing it; a git killed in between leaves the file, and every later
//! command on that file fails. okstra clears such a lock only in its own
//! places (a worktree's own git directory, the ref of one of its branches)
//! and only when no live git process is seen working there; the user's
//! `index.lock` and `HEAD.lock` are never touched.

use super::GitError;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Remove `lock` if it exists and no running git mentions any of `near`
/// (in its working directory, command line or environment); a lock some git
/// may hold is [`GitError::LockBusy`].
pub(super) fn clear_stale(lock: &Path, near: &[&Path]) -> Result<(), GitError> {
    if fs::symlink_metadata(lock).is_err() {
        return Ok(());
    }
    ensure_idle(lock, near)?;
    match fs::remove_file(lock) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(GitError::Io {
            path: lock.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// How long okstra waits for a running git near its files to finish: one
/// an exec killed (alone) had started goes on, orphaned, for a moment, and
/// the next exec must not refuse the job for it.
const WAIT_FOR_GIT: Duration = Duration::from_secs(5);

/// [`GitError::LockBusy`] for `what` if a running git mentions any of
/// `near` and still does after [`WAIT_FOR_GIT`]: okstra must not remove
/// files under it.
pub(super) fn ensure_idle(what: &Path, near: &[&Path]) -> Result<(), GitError> {
    let deadline = Instant::now() + WAIT_FOR_GIT;
    loop {
        match live_git_near(near) {
            None => return Ok(()),
            Some(pid) if Instant::now() >= deadline => {
                return Err(GitError::LockBusy {
                    lock: what.to_path_buf(),
                    pid,
                })
            }
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Every `*.lock` file directly in `dir` (a worktree's own git directory).
pub(super) fn locks_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "lock"))
        .collect()
}

/// The pid of a running `git` (other than us) whose working directory lies
/// under one of `near`, or whose command line or environment names one.
/// Linux's `/proc`; processes we may not inspect are passed over.
fn live_git_near(near: &[&Path]) -> Option<u32> {
    let me = std::process::id();
    for entry in fs::read_dir("/proc").ok()?.filter_map(|e| e.ok()) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let proc = entry.path();
        let is_git = fs::read_to_string(proc.join("comm")).is_ok_and(|c| c.trim() == "git");
        if !is_git {
            continue;
        }
        let cwd = fs::read_link(proc.join("cwd")).ok();
        let text = [
            fs::read(proc.join("cmdline")).unwrap_or_default(),
            fs::read(proc.join("environ")).unwrap_or_default(),
        ]
        .concat();
        let names = |p: &Path| {
            cwd.as_deref().is_some_and(|c| c.starts_with(p))
                || contains(&text, p.as_os_str().as_encoded_bytes())
        };
        if near.iter().any(|p| names(p)) {
            return Some(pid);
        }
    }
    None
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}
