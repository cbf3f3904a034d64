//! The one way this module runs git: the user's `git` from `PATH`, with an
//! environment and configuration that no user setting can redirect.
//!
//! Every call clears the `GIT_*` variables the caller inherited (a stray
//! `GIT_DIR` or `GIT_INDEX_FILE` would aim a command at the user's
//! repository), turns hooks off, never prompts, never reads stdin, speaks
//! the C locale, and names its repository explicitly (`--git-dir`,
//! `--work-tree`) except in [`Call::discover`], the one lookup that needs
//! git's repository discovery.

use super::GitError;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Configuration given on every command line, over anything the user's
/// files say. `core.hooksPath=/dev/null`: git looks for `<hooksPath>/<hook>`,
/// and nothing can live under `/dev/null`; an empty value would make git
/// look for `/pre-commit` at the file-system root instead (checked on 2.47).
const OVERRIDES: &[&str] = &[
    "core.hooksPath=/dev/null",
    // No fsmonitor daemon left running in a worktree, no detached gc or
    // maintenance started behind our back.
    "core.fsmonitor=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    // Output we parse stays plain.
    "color.ui=false",
    "log.showSignature=false",
    "submodule.recurse=false",
    "advice.detachedHead=false",
];

/// The environment a git command gets: the caller's, less every `GIT_*`
/// variable, plus okstra's own settings. `GIT_OPTIONAL_LOCKS=0` keeps
/// `git status` from rewriting the user's index to refresh it.
pub(super) fn hermetic_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = inherited
        .into_iter()
        .filter(|(k, _)| !k.as_encoded_bytes().starts_with(b"GIT_"))
        .filter(|(k, _)| k != "LC_ALL" && k != "LANGUAGE")
        .collect();
    for (k, v) in [
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_OPTIONAL_LOCKS", "0"),
        ("GIT_PAGER", "cat"),
        ("GIT_EDITOR", "false"),
        ("GIT_ADVICE", "0"),
        ("LC_ALL", "C"),
    ] {
        env.push((k.into(), v.into()));
    }
    env
}

/// What a finished git command left: its exit code (None: killed by a
/// signal) and its output.
pub(super) struct Output {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

/// One git command line, built up, then run.
pub(super) struct Call {
    cwd: PathBuf,
    /// Global options (`--git-dir`, `-c`): they go before the subcommand.
    global: Vec<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Call {
    /// A command run in `cwd` that finds its repository as git does, from
    /// `cwd` upwards. Only [`super::Repo::find`] uses this.
    pub fn discover(cwd: &Path) -> Call {
        Call {
            cwd: cwd.to_path_buf(),
            global: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// A command on the repository whose git directory is `git_dir` and
    /// whose work tree is `work_tree`, run in `work_tree`. With both named,
    /// git does no discovery; `GIT_CEILING_DIRECTORIES` (the work tree's
    /// parent) would stop it at the work tree if it ever did.
    pub fn at(git_dir: &Path, work_tree: &Path) -> Call {
        let mut call = Call::discover(work_tree);
        let mut dir = OsString::from("--git-dir=");
        dir.push(git_dir);
        let mut tree = OsString::from("--work-tree=");
        tree.push(work_tree);
        call.global = vec![dir, tree];
        if let Some(parent) = work_tree.parent() {
            call.env
                .push(("GIT_CEILING_DIRECTORIES".into(), parent.as_os_str().into()));
        }
        call
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Call {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Call
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Call {
        self.env.push((key.into(), value.as_ref().to_os_string()));
        self
    }

    /// The command line as text, for errors.
    fn argv(&self) -> Vec<String> {
        let mut argv = vec!["git".to_string()];
        for o in OVERRIDES {
            argv.push("-c".into());
            argv.push((*o).into());
        }
        argv.extend(
            self.global
                .iter()
                .chain(&self.args)
                .map(|a| a.to_string_lossy().into_owned()),
        );
        argv
    }

    /// Run it and hand back how it ended, whatever its exit code.
    pub fn output(&self) -> Result<Output, GitError> {
        let program = git_program()?;
        let mut cmd = Command::new(program);
        for o in OVERRIDES {
            cmd.arg("-c").arg(o);
        }
        cmd.args(&self.global)
            .args(&self.args)
            .current_dir(&self.cwd)
            .env_clear()
            .envs(hermetic_env(std::env::vars_os()))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = cmd.output().map_err(|source| GitError::Spawn {
            argv: self.argv(),
            source,
        })?;
        Ok(Output {
            code: out.status.code(),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).trim_end().to_string(),
        })
    }

    /// Run it; a non-zero exit is an error carrying git's stderr.
    pub fn run(&self) -> Result<Vec<u8>, GitError> {
        let out = self.output()?;
        if out.code == Some(0) {
            Ok(out.stdout)
        } else {
            Err(self.failed(out))
        }
    }

    /// [`Call::run`], its stdout as trimmed text.
    pub fn text(&self) -> Result<String, GitError> {
        let out = self.run()?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// The error for a command that ended as `out` did.
    pub fn failed(&self, out: Output) -> GitError {
        GitError::Failed {
            argv: self.argv(),
            code: out.code,
            stderr: out.stderr,
        }
    }

    /// An error for output git gave that this module cannot read.
    pub fn unexpected(&self, detail: impl Into<String>) -> GitError {
        GitError::Unexpected {
            argv: self.argv(),
            detail: detail.into(),
        }
    }
}

/// The user's `git`, found on `PATH` as a shell would.
fn git_program() -> Result<PathBuf, GitError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    crate::process::find_program("git", &path).map_err(|_| GitError::NotFound)
}
