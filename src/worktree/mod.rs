//! Git worktrees for workers, the layer a `worktree = "git"` job is to be
//! built on (not yet wired to a spec key): the project's repository
//! ([`Repo`]), one worktree and branch per worker ([`Worktree`]), the
//! commits okstra makes there, and the names it gives them.
//!
//! Git runs through its command line (the user's `git` on `PATH`), never a
//! library, and never so that it could act on the user's checkout: every
//! command is hermetic (see `git.rs`), every worktree command names the
//! worktree's own git directory, and the only commands that write into the
//! user's repository write objects and refs under `refs/heads/okstra*`, a
//! worktree's registration, or nothing. The user's `HEAD`, index and files
//! are never touched.
//!
//! The caller is the single writer of okstra's worktrees and branches (exec
//! holds its run lock): a git lock file found in one of them was left by a
//! killed git, unless a live git process is seen working there.

mod git;
mod locks;
mod names;
mod repo;
mod tree;

#[cfg(test)]
mod tests;

pub use names::{branch_name_ok, message_with_trailers, ref_component, trailers};
pub use repo::Repo;
pub use tree::Worktree;

use std::path::PathBuf;

/// What went wrong running git, or around it.
#[derive(thiserror::Error, Debug)]
pub enum GitError {
    /// No `git` on `PATH`.
    #[error("git is not installed (no `git` on PATH)")]
    NotFound,
    /// git was found but could not be started.
    #[error("cannot run `{}`: {source}", argv.join(" "))]
    Spawn {
        argv: Vec<String>,
        source: std::io::Error,
    },
    /// git ran and exited non-zero (or was killed: no code).
    #[error("`{}` failed ({}): {stderr}", argv.join(" "), code.map_or("killed".to_string(), |c| format!("exit {c}")))]
    Failed {
        argv: Vec<String>,
        code: Option<i32>,
        stderr: String,
    },
    /// git's output was not what this module reads.
    #[error("`{}` gave output okstra cannot read: {detail}", argv.join(" "))]
    Unexpected { argv: Vec<String>, detail: String },
    /// A branch or ref name git would refuse.
    #[error("`{0}` is not a valid branch name")]
    BadName(String),
    /// A worktree path okstra will not use (relative, or holding the
    /// repository itself).
    #[error("{}: {reason}", path.display())]
    BadPath { path: PathBuf, reason: String },
    /// Something at the worktree path that okstra did not make, or that was
    /// changed since: left alone.
    #[error("{}: {reason}; remove it or move it away, then run again", path.display())]
    NotOurs { path: PathBuf, reason: String },
    /// A git lock file (or a worktree) a running git process may be using.
    #[error("{} is in use by a running git (pid {pid}); wait for it to finish, then run again", lock.display())]
    LockBusy { lock: PathBuf, pid: u32 },
    /// Reading or removing okstra's own files around a worktree.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl GitError {
    fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> GitError {
        let path = path.into();
        move |source| GitError::Io { path, source }
    }
}

/// The installed git's version, e.g. `2.47.3` (for `okstra doctor`). This
/// module needs 2.36 or later (`git worktree list -z`).
pub fn git_version() -> Result<String, GitError> {
    let call = git::Call::discover(&std::env::temp_dir()).arg("--version");
    let text = call.text()?;
    match text.strip_prefix("git version ") {
        Some(v) => Ok(v.to_string()),
        None => Err(call.unexpected(format!("no version in {text:?}"))),
    }
}
